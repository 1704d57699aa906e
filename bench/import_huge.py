"""`launchlab import` of a log with one endless line, against the same number of bytes in ordinary lines, in one run.

    .venv/bin/python bench/import_huge.py [--mb 512]

Issue 39: a 2 GB log without a newline took 36 s and 4.3 GB to import (the masked copy held the line whole, twice).
This builds, in a temporary folder, two logs of a real SGLang startup followed by MB of progress output: one
without a newline (a progress bar redrawn with carriage returns only), the reference in lines of 100 bytes. A
secret is declared and written into each, so the copy is masked. It runs `launchlab import` (no HTML) on each in a
fresh interpreter and prints wall time and peak memory (the child's ru_maxrss) of both and their ratios. Target:
the endless line costs at most 1.25 × the reference's peak memory. Exit 1 when missed, or when the disk has no
room (checked first). The files are removed afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
HEAD = ROOT / "params" / "demo-import" / "logs" / "car_085.log"
SECRET = "hf_benchmarkTokenValue0123456789"
TARGET_MEMORY_RATIO = 1.25


def write_log(path: Path, mb: int, endless: bool) -> None:
    block = (b"\r" + b"#" * 99) if endless else (b"#" * 99 + b"\n")
    with open(path, "wb") as fh:
        fh.write(HEAD.read_bytes())
        fh.write(f"HF_TOKEN={SECRET}\n".encode())
        chunk = block * 10_000  # 1 MB
        for _ in range(mb):
            fh.write(chunk)


def imports_file(folder: Path, log: Path) -> Path:
    path = folder / f"{log.stem}.yaml"
    path.write_text(yaml.safe_dump({
        "experiment": log.stem, "server": {"kind": "sglang"}, "secrets": ["HF_TOKEN"],
        "factors": {"f": {"a": {}}}, "baseline": {"f": "a"},
        "runs": [{"levels": {"f": "a"}, "log": log.name, "command": f"env HF_TOKEN={SECRET} python3 -m sglang"}]}))
    return path


def measure(imports: Path, out: Path) -> tuple[float, float]:
    """Wall seconds and peak MiB of one `launchlab import` in a fresh interpreter (its own rusage)."""
    code = ("import resource, sys; from launchlab.runner import importer; "
            f"importer.import_runs({str(imports)!r}, {str(out)!r}, summarize=False); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"launchlab import failed:\n{proc.stderr[-2000:]}")
    return time.monotonic() - t0, int(proc.stdout.strip().splitlines()[-1]) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512, help="MB of output after the startup (an import takes ≤ 1 GiB)")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="import-huge-"))
    try:
        need = 4 * args.mb * 2**20  # two logs and their copies
        if shutil.disk_usage(folder).free < need * 1.1:
            print(f"not enough free disk in {folder.parent} for {need / 2**30:.1f} GiB of logs and copies")
            return 1
        figures = {}
        for name, endless in (("reference", False), ("endless", True)):
            log = folder / f"{name}.log"
            write_log(log, args.mb, endless)
            seconds, mib = measure(imports_file(folder, log), folder / "out")
            copied = next((folder / "out").glob(f"{name}/*/runs/*/server.log"))
            # grep, not read_bytes here: a child's ru_maxrss starts from this process's size when it forks
            leaked = subprocess.run(["grep", "-q", "-F", SECRET, str(copied)]).returncode == 0
            figures[name] = (seconds, mib)
            print(f"{name:<10} {args.mb} MB of {'one line without a newline' if endless else 'lines of 100 bytes'}: "
                  f"{seconds:6.1f} s, peak {mib:6.0f} MiB, secret in the copy: {leaked}")
            log.unlink()
            if leaked:
                return 1
        ratio_t = figures["endless"][0] / figures["reference"][0]
        ratio_m = figures["endless"][1] / figures["reference"][1]
        ok = ratio_m <= TARGET_MEMORY_RATIO
        print(f"endless / reference: time {ratio_t:.2f} ×, peak memory {ratio_m:.2f} × — target ≤ "
              f"{TARGET_MEMORY_RATIO} × memory {'met' if ok else 'MISSED'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
