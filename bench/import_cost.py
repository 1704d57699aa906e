"""What a new Python process of the kit pays before it does anything: the CPU time of its imports, on this machine,
against a bare interpreter measured in the same run.

    .venv/bin/python bench/import_cost.py [--repeat 5]

Every `launchlab run`, every papermill call, every summary and many tests start such a process, so this cost is
paid hundreds of times by `make test`. Printed: the median user+system CPU seconds of `python -c "import X"` for
the kit's entry points and the heaviest third-party module they pull in (nbformat, through jsonschema), each minus
the bare interpreter's. If rfc3987-syntax is installed, its own import is timed too: jsonschema >= 4.25 imports
it from nbformat and it builds dozens of Earley parsers at import, which is why pyproject.toml holds jsonschema
below 4.25 (issue 22). Target: `import nbformat` under 1 s of CPU beyond the bare interpreter; exit 1 if missed.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import subprocess
import sys

TARGET_NBFORMAT_S = 1.0
MODULES = ("nbformat", "papermill", "launchlab.cli", "launchlab.runner.batch")


def cpu_seconds(code: str) -> float:
    """User + system CPU of one fresh interpreter running code (the children's rusage, before and after)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cpu(code: str, repeat: int) -> float:
    return statistics.median(cpu_seconds(code) for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from importlib.metadata import version

    bare = median_cpu("pass", args.repeat)
    print(f"jsonschema {version('jsonschema')}; median of {args.repeat} fresh interpreters each")
    print(f"{'bare interpreter':<24} {bare:6.2f} s CPU (the reference)")
    costs = {}
    for module in MODULES:
        costs[module] = median_cpu(f"import {module}", args.repeat) - bare
        print(f"{'import ' + module:<24} {costs[module]:6.2f} s CPU beyond it ({costs[module] / bare:.1f} × the bare start)")
    if importlib.util.find_spec("rfc3987_syntax") is not None:
        alone = median_cpu("import rfc3987_syntax", args.repeat) - bare
        print(f"{'import rfc3987_syntax':<24} {alone:6.2f} s CPU beyond it (imported by jsonschema >= 4.25 only)")
    ok = costs["nbformat"] <= TARGET_NBFORMAT_S
    print(f"target: import nbformat ≤ {TARGET_NBFORMAT_S:.1f} s CPU beyond the bare interpreter — "
          f"{'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
