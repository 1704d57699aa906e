"""On a real GPU: how often does each sampler see a 16 GiB allocation that lives for about 60 ms?

    python3 bench/sampling_resolution.py [--holds 20] [--hold-ms 60] [--gpu 0]

Starts `nvidia-smi -lms 100` (the kit's default sampler) and the NVML sampler at 5 ms side by side, then
allocates and frees 16 GiB with torch `--holds` times, and counts for each sampler the holds during which
one of its samples showed the allocation (memory.used above the idle level by more than 8 GiB). Prints the
counts, the detection ratio NVML / nvidia-smi, and each sampler's median interval.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from launchlab.gpu import telemetry  # noqa: E402
from launchlab.hosts import commands  # noqa: E402

GIB = 1 << 30


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--holds", type=int, default=20)
    ap.add_argument("--hold-ms", type=float, default=60)
    ap.add_argument("--gpu", type=int, default=0)
    args = ap.parse_args()
    import torch

    tmp = Path(tempfile.mkdtemp(prefix="sampling-"))
    smi_csv, nvml_csv = tmp / "smi.csv", tmp / "nvml.csv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1] / "lib"),
                                                                      os.environ.get("PYTHONPATH")]))}
    samplers = [subprocess.Popen(commands.gpu_sampler(100, [args.gpu]), stdout=open(smi_csv, "w")),
                subprocess.Popen([sys.executable, "-m", "launchlab.nvml_sampler", "--interval-ms", "5", "-i", str(args.gpu)],
                                 stdout=open(nvml_csv, "w"), env=env)]
    device = torch.device(f"cuda:{args.gpu}")
    torch.cuda.init()
    torch.empty(1, device=device)  # the CUDA context, before the idle level is taken
    time.sleep(1.5)
    windows = []
    for _ in range(args.holds):
        start = datetime.now()
        block = torch.empty(16 * GIB, dtype=torch.uint8, device=device)
        block.fill_(1)
        torch.cuda.synchronize(device)
        while (datetime.now() - start).total_seconds() * 1000 < args.hold_ms:
            time.sleep(0.001)
        del block
        torch.cuda.empty_cache()
        torch.cuda.synchronize(device)
        windows.append((start, datetime.now()))
        time.sleep(0.4)
    time.sleep(0.5)
    for p in samplers:
        p.terminate()
        p.wait()
    results = {}
    for name, path in (("nvidia-smi -lms 100", smi_csv), ("NVML every 5 ms", nvml_csv)):
        frame = telemetry.read_query_csv(path)
        idle = frame[frame["timestamp"] < windows[0][0] - timedelta(seconds=0.3)]["memory.used"].median()
        seen = 0
        for start, end in windows:
            inside = frame[(frame["timestamp"] >= start) & (frame["timestamp"] <= end + timedelta(milliseconds=10))]
            seen += bool((inside["memory.used"] - idle > 8 * 1024).any())
        interval = frame["timestamp"].diff().dt.total_seconds().median() * 1000
        results[name] = seen
        print(f"{name:22s} saw {seen:2d} of {args.holds} holds of {args.hold_ms:.0f} ms "
              f"(median interval {interval:.1f} ms, {len(frame)} samples)")
    smi, nvml = results.values()
    print(f"detection ratio NVML / nvidia-smi: {nvml / smi:.2f}" if smi else f"nvidia-smi saw none; NVML saw {nvml}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
