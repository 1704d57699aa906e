"""The shared state of a simulated GPU box: its GPUs, and per-process allocations in one file per pid.

Each simulated process writes its own allocation file (atomic rename), so there is no lock to hold and a
killed process leaves a file whose pid is dead; readers ignore and remove such files, which is how the
simulated nvidia-smi "forgets" the memory of a process once it is gone, like the real driver does.

Paths are plain strings joined with os.path (a Path is accepted wherever a folder is given): the simulated
nvidia-smi imports this module at each of its starts, thousands of times in a test run, and pathlib's import with
its own (urllib.parse, fnmatch) was, with datetime's, a third of that start's import time.
"""

from __future__ import annotations

import json
import os

STATE_ENV = "LAUNCHLAB_SIM_STATE"
SIM_DRIVER = "580.159.04"
SIM_CUDA = "13.0"


def state_dir() -> str:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise SystemExit(f"{STATE_ENV} is not set: this program only runs on a launchlab simulated host")
    return path


def write_host(root: str | os.PathLike, host: dict) -> None:
    os.makedirs(os.path.join(root, "alloc"), exist_ok=True)
    _atomic_write(os.path.join(root, "host.json"), json.dumps(host, indent=1))


def read_host(root: str | os.PathLike) -> dict:
    with open(os.path.join(root, "host.json"), encoding="utf-8") as fh:
        return json.load(fh)


def gpu_uuid(host_name: str, index: int) -> str:
    """A stable fake UUID per (host, index), shaped like the real ones."""
    import hashlib

    h = hashlib.sha256(f"{host_name}/{index}".encode()).hexdigest()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def pid_alive(pid: int) -> bool:
    """True for a running process; False for a dead or zombie one (a zombie holds no GPU memory)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def set_allocation(root: str | os.PathLike, pid: int, gpu: int, mib: float, name: str, util_pct: int = 0) -> None:
    record = {"pid": pid, "gpu": gpu, "mib": round(mib), "name": name, "util_pct": util_pct}
    _atomic_write(os.path.join(root, "alloc", f"{pid}.json"), json.dumps(record))


def allocations(root: str | os.PathLike) -> list[dict]:
    """Allocations of live processes; files of dead processes are removed."""
    out = []
    folder = os.path.join(root, "alloc")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except FileNotFoundError:
        names = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            continue  # being replaced right now
        if pid_alive(record["pid"]):
            out.append(record)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return out


def used_mib(root: str | os.PathLike, gpu: int, allocs: list[dict] | None = None) -> int:
    allocs = allocations(root) if allocs is None else allocs
    return sum(a["mib"] for a in allocs if a["gpu"] == gpu)


def free_mib(root: str | os.PathLike, gpu: int) -> int:
    g = read_host(root)["gpus"][gpu]
    return g["mem_total_mib"] - g["mem_reserved_mib"] - used_mib(root, gpu)


def _atomic_write(path: str, text: str) -> None:
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
