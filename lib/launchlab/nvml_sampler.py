"""A fast GPU-memory sampler through NVML, for when nvidia-smi's ~100 ms is too coarse.

    python3 -m launchlab.nvml_sampler --interval-ms 5 [-i 0,1]

Prints exactly the CSV of `nvidia-smi --query-gpu=timestamp,index,uuid,memory.total,memory.used,memory.free,
utilization.gpu --format=csv,nounits -lms N` (header included), so the kit reads both the same way. Needs
the `nvidia-ml-py` package on the host (`pip install launchlab[nvml]`). memory.used excludes the driver's
reserved memory, as nvidia-smi's does on R510+ drivers (NVML's v2 memory info).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from datetime import datetime

HEADER = ("timestamp, index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
          "utilization.gpu [%]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("-i", "--id", default=None, help="GPU indices, e.g. 0,1 (default: all)")
    args = parser.parse_args(argv)
    import pynvml  # imported here: only hosts that ask for this sampler have it

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    indices = [int(i) for i in args.id.split(",")] if args.id else list(range(count))
    handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
    uuids = {i: pynvml.nvmlDeviceGetUUID(h) for i, h in handles}
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = sys.stdout
    out.write(HEADER + "\n")
    mib = 1 << 20
    while True:
        for i, handle in handles:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=v2) if v2 else pynvml.nvmlDeviceGetMemoryInfo(handle)
            util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            stamp = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            out.write(f"{stamp}, {i}, {uuids[i]}, {mem.total // mib}, {-(-mem.used // mib)}, {mem.free // mib}, {util}\n")
        out.flush()
        time.sleep(args.interval_ms / 1000)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, BrokenPipeError):
        sys.exit(0)
