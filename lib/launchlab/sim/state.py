"""The shared state of a simulated GPU box: its GPUs, and per-process allocations in one file per pid.

Each simulated process writes its own allocation file (atomic rename), so there is no lock to hold and a
killed process leaves a file whose pid is dead; readers ignore and remove such files, which is how the
simulated nvidia-smi "forgets" the memory of a process once it is gone, like the real driver does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_ENV = "LAUNCHLAB_SIM_STATE"
SIM_DRIVER = "580.159.04"
SIM_CUDA = "13.0"


def state_dir() -> Path:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise SystemExit(f"{STATE_ENV} is not set: this program only runs on a launchlab simulated host")
    return Path(path)


def write_host(root: Path, host: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "alloc").mkdir(exist_ok=True)
    _atomic_write(root / "host.json", json.dumps(host, indent=1))


def read_host(root: Path) -> dict:
    return json.loads((root / "host.json").read_text())


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


def set_allocation(root: Path, pid: int, gpu: int, mib: float, name: str, util_pct: int = 0) -> None:
    record = {"pid": pid, "gpu": gpu, "mib": round(mib), "name": name, "util_pct": util_pct}
    _atomic_write(root / "alloc" / f"{pid}.json", json.dumps(record))


def allocations(root: Path) -> list[dict]:
    """Allocations of live processes; files of dead processes are removed."""
    out = []
    for path in sorted((root / "alloc").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now
        if pid_alive(record["pid"]):
            out.append(record)
        else:
            path.unlink(missing_ok=True)
    return out


def used_mib(root: Path, gpu: int, allocs: list[dict] | None = None) -> int:
    allocs = allocations(root) if allocs is None else allocs
    return sum(a["mib"] for a in allocs if a["gpu"] == gpu)


def free_mib(root: Path, gpu: int) -> int:
    g = read_host(root)["gpus"][gpu]
    return g["mem_total_mib"] - g["mem_reserved_mib"] - used_mib(root, gpu)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
