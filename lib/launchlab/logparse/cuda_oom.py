"""PyTorch's CUDA out-of-memory message → what it says about the GPU's memory, as per-rank fields in GiB.

The message names the request that failed and the state of the device at that moment, which tells an OOM caused
by this process (most memory allocated by PyTorch) from one caused by a neighbour (little free, little allocated).
Two formats: torch ≥ 2.1 `Tried to allocate 786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB
is free. Process 3270336 has 78.96 GiB memory in use. Of the allocated memory 68.83 GiB is allocated by PyTorch,
with 660.00 MiB allocated in private pools (e.g., CUDA Graphs), and 331.08 MiB is reserved by PyTorch but
unallocated.`, and torch < 2.1 `Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already
allocated; 3.12 MiB free; 14.66 GiB reserved in total by PyTorch)`.
"""

from __future__ import annotations

import re

_SIZE = r"([\d.]+ [KMGT]?i?B)"
_UNITS = {"B": 0, "KiB": 1, "KB": 1, "MiB": 2, "MB": 2, "GiB": 3, "GB": 3, "TiB": 4, "TB": 4}
_FIELDS = (
    ("oom_request_gib", re.compile(rf"Tried to allocate {_SIZE}")),
    ("oom_total_gib", re.compile(rf"total capacity of {_SIZE}|{_SIZE} total capacity")),
    ("oom_free_gib", re.compile(rf"of which {_SIZE} is free|{_SIZE} free\)|{_SIZE} free;")),
    ("oom_process_used_gib", re.compile(rf"has {_SIZE} memory in use")),
    ("oom_torch_allocated_gib", re.compile(rf"{_SIZE} is allocated by PyTorch|{_SIZE} already allocated")),
    ("oom_private_pools_gib", re.compile(rf"with {_SIZE} allocated in private pools")),
    ("oom_reserved_unallocated_gib", re.compile(rf"{_SIZE} is reserved by PyTorch but unallocated")),
    ("oom_reserved_gib", re.compile(rf"{_SIZE} reserved in total by PyTorch")),
)
_GPU = re.compile(r"GPU (\d+) has a total capacity|\(GPU (\d+);")


def oom_fields(message: str) -> dict[str, float]:
    """The fields a CUDA out-of-memory message states ({} for any other message); the GPU index as `oom_gpu_index`."""
    if "out of memory" not in message:
        return {}
    fields = {}
    for name, rx in _FIELDS:
        m = rx.search(message)
        if m is not None:
            fields[name] = gib(next(g for g in m.groups() if g is not None))
    if (gpu := _GPU.search(message)) is not None:
        fields["oom_gpu_index"] = float(gpu.group(1) or gpu.group(2))
    return fields


def gib(size: str) -> float:
    """`786.00 MiB` → 0.767578125 (every unit taken as a power of 1024, as PyTorch prints them)."""
    number, unit = size.split()
    return float(number) / 1024 ** (3 - _UNITS[unit])
