"""What a server log says about the software and the launch it ran, beyond the per-rank numbers: the server's
version, the engine generation, the NCCL version, the model, the parallel sizes, the Python of its install,
the GPU's total memory where the log prints it.

These are the facts two runs must share to be compared, and they are all a by-hand log has (`launchlab import`
knows nothing else of the run). Every value is what a line of the log states; a fact no line states is absent,
never guessed (a version inferred from the log's format is not stated).
"""

from __future__ import annotations

import re
from contextlib import closing
from pathlib import Path

from launchlab.logparse import ParsedLog
from launchlab.logparse.common import open_lines
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.serverkind import LogFacts

HEAD_LINES = 20_000  # versions, arguments and install paths are printed at startup (or in the first traceback)
# a GPU's total memory as the log prints it (vLLM's memory profiling line, PyTorch's OOM message)
_GPU_TOTAL = ("total_gpu_gib", "oom_total_gib")


def _arg(args: dict[str, str], name: str | None) -> str | None:
    if name is None or args.get(name) in (None, "", "None"):
        return None
    return str(args[name]).strip("'\"")


def read(path: str | Path, parsed: ParsedLog) -> dict:
    """The facts of one server log ({name: value}; a fact the log does not state is left out), read as its kind
    says (ServerKind.log_facts): a kind that names no version line or package states none."""
    kind = KINDS[parsed.server].log_facts if parsed.server in KINDS else LogFacts()
    found: dict[str, str] = {"server": parsed.server}
    version, python = _head_facts(path, kind)
    totals = {f"{v:.2f}" for fields in parsed.ranks.values() for k, v in fields.items() if k in _GPU_TOTAL}
    values = {"gpu_total_gib": ", ".join(sorted(totals)) or None,
              "server_version": version, **parsed.facts, "nccl_version": parsed.nccl_version,
              "model": _arg(parsed.args, kind.model), "tp_size": _arg(parsed.args, kind.tp_size) or _stated_tp(parsed),
              "dp_size": _arg(parsed.args, kind.dp_size), "python": python}
    found.update({k: v for k, v in values.items() if v is not None})
    return found


def _stated_tp(parsed: ParsedLog) -> str | None:
    """The TP size the log states outside its argument dump (logparse/parallel.py: `tp_size=8` in a line, a process
    group's size); a size only the rank tags bound is not a stated fact."""
    sizes = parsed.parallel
    return str(sizes["tp"]) if sizes and not sizes.get("tp_at_least", True) else None


def _head_facts(path: str | Path, kind: LogFacts) -> tuple[str | None, str | None]:
    """The version the log's first lines state, and the Python its install path names."""
    install = re.compile(rf"/lib/python(\d+\.\d+)/site-packages/{re.escape(kind.package)}/") if kind.package else None
    version = python = None
    with closing(open_lines(path)) as lines:
        for n, line in enumerate(lines):
            if n >= HEAD_LINES or ((version or not kind.version) and (python or not install)):
                break
            if version is None and kind.version and (m := kind.version.search(line)):
                version = next(g for g in m.groups() if g).lstrip("v")
            if python is None and install and (m := install.search(line)):
                python = m.group(1)
    return version, python


# how each fact is named in a confound (and each kind's own facts, ServerKind.log_facts.labels)
LABELS = {"server": "server kind", "server_version": "server version",
          **{k: v for kind in KINDS.values() for k, v in kind.log_facts.labels.items()},
          "nccl_version": "NCCL version", "model": "model", "tp_size": "TP size", "dp_size": "DP size",
          "python": "Python of the server's install", "gpu_total_gib": "GPU memory total in GiB"}

