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

HEAD_LINES = 20_000  # versions, arguments and install paths are printed at startup (or in the first traceback)

# vLLM: "vLLM API server version 0.7.3", "Initializing a V1 LLM engine (v0.8.5) with config", "vLLM version 0.9";
# SGLang: "sglang==0.5.6" (pip freeze / env dumps), "SGLang version 0.5.8"
_VERSION = re.compile(r"vLLM API server version (?P<a>v?\d+\.\d+[\w.+-]*)"
                      r"|Initializing an? (?:V1 )?LLM engine \(v(?P<b>\d+\.\d+[\w.+-]*)\)"
                      r"|\b(?:vLLM|SGLang|sglang) version:? v?(?P<c>\d+\.\d+[\w.+-]*)"
                      r"|\b(?:sglang|vllm)==(?P<d>\d+\.\d+[\w.+-]*)")
_PYTHON = re.compile(r"/lib/python(\d+\.\d+)/site-packages/(?:sglang|vllm)/")
# the arguments that name the launch's shape, under SGLang's and vLLM's spellings
_MODEL = ("model_path", "model")
_TP = ("tp_size", "tensor_parallel_size")
_DP = ("dp_size", "data_parallel_size")
# a GPU's total memory as the log prints it (vLLM's memory profiling line, PyTorch's OOM message)
_GPU_TOTAL = ("total_gpu_gib", "oom_total_gib")


def _arg(args: dict[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if args.get(name) not in (None, "", "None"):
            return str(args[name]).strip("'\"")
    return None


def read(path: str | Path, parsed: ParsedLog) -> dict:
    """The facts of one server log ({name: value}; a fact the log does not state is left out)."""
    found: dict[str, str] = {"server": parsed.server}
    version = python = None
    with closing(open_lines(path)) as lines:
        for n, line in enumerate(lines):
            if n >= HEAD_LINES or (version and python):
                break
            if version is None and (m := _VERSION.search(line)):
                version = next(g for g in m.groups() if g).lstrip("v")
            if python is None and (m := _PYTHON.search(line)):
                python = m.group(1)
    totals = {f"{v:.2f}" for fields in parsed.ranks.values() for k, v in fields.items() if k in _GPU_TOTAL}
    values = {"gpu_total_gib": ", ".join(sorted(totals)) or None,
              "server_version": version, "engine": parsed.engine, "nccl_version": parsed.nccl_version,
              "model": _arg(parsed.args, _MODEL), "tp_size": _arg(parsed.args, _TP), "dp_size": _arg(parsed.args, _DP),
              "python": python}
    found.update({k: v for k, v in values.items() if v is not None})
    return found


# how each fact is named in a confound
LABELS = {"server": "server kind", "server_version": "server version", "engine": "vLLM engine generation",
          "nccl_version": "NCCL version", "model": "model", "tp_size": "TP size", "dp_size": "DP size",
          "python": "Python of the server's install", "gpu_total_gib": "GPU memory total in GiB"}
