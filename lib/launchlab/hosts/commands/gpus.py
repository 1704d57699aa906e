"""nvidia-smi commands: the GPU list, the sampler that traces memory while a server starts, and the snapshots
of GPU memory and of the processes using it. The field lists are the columns telemetry.py parses."""

from __future__ import annotations

import shlex

SAMPLER_FIELDS = ("timestamp", "index", "uuid", "memory.total", "memory.used", "memory.free", "utilization.gpu")
SNAPSHOT_FIELDS = ("index", "uuid", "name", "memory.total", "memory.used")
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def _select(gpus: list[int] | None) -> list[str]:
    """`-i 0,1`: only the GPUs a run was given (all of them when it was given none)."""
    return ["-i", ",".join(str(int(g)) for g in gpus)] if gpus else []


def gpu_indices() -> str:
    """The host's GPU indices, one per line (nothing when nvidia-smi is missing or fails)."""
    return "nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true"


def gpu_sampler(interval_ms: int, gpus: list[int] | None = None, kind: str = "nvidia-smi") -> list[str]:
    """The sampler's argv (started detached, its stdout the trace): a `--query-gpu` CSV every interval_ms."""
    if kind == "nvml":  # same CSV, through NVML (launchlab and nvidia-ml-py on the host's python3)
        return ["python3", "-m", "launchlab.nvml_sampler", "--interval-ms", str(int(interval_ms)), *_select(gpus)]
    return ["nvidia-smi", f"--query-gpu={','.join(SAMPLER_FIELDS)}", "--format=csv,nounits", "-lms",
            str(int(interval_ms)), *_select(gpus)]


def gpu_snapshot(gpus: list[int] | None = None) -> str:
    """Each GPU's memory now (SNAPSHOT_FIELDS, no header)."""
    return shlex.join(["nvidia-smi", f"--query-gpu={','.join(SNAPSHOT_FIELDS)}", "--format=csv,noheader,nounits",
                       *_select(gpus)])


def gpu_apps(gpus: list[int] | None = None) -> str:
    """The processes holding GPU memory now (APP_FIELDS, no header)."""
    return shlex.join(["nvidia-smi", f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv,noheader,nounits",
                       *_select(gpus)])
