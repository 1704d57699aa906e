"""On a 2-GPU machine: two variants one after the other on one GPU, then at once on two GPUs (gpu_slots).

    python3 bench/parallel_gpus.py PARAMS.yaml

Takes the first two variants of PARAMS (one repetition each) and times `launchlab run` twice in the same
run: sequential (one GPU slot) and parallel (`gpu_slots: [[0], [1]]`, each run with its own
CUDA_VISIBLE_DEVICES). Prints both wall times and the speedup (sequential / parallel).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml


def variant_file(src: Path, slots: list[list[int]], name: str) -> Path:
    data = yaml.safe_load(src.read_text())
    data["experiment"] = f"{data['experiment']}-{name}"
    data["variants"] = (data.get("variants") or [])[:2]
    data["repetitions"] = 1
    host = next(iter(data["hosts"]))
    data["hosts"][host]["gpu_slots"] = slots
    out = src.with_name(f".bench-{name}.yaml")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def timed_run(params: Path) -> float:
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-m", "launchlab.cli", "run", str(params)], check=True)
    return time.perf_counter() - tic


def main() -> int:
    src = Path(sys.argv[1])
    sequential = timed_run(variant_file(src, [[0]], "sequential"))
    parallel = timed_run(variant_file(src, [[0], [1]], "parallel"))
    print(f"two variants one after the other on GPU 0: {sequential:.1f} s")
    print(f"two variants at once on GPUs 0 and 1:      {parallel:.1f} s")
    print(f"speedup (sequential / parallel): {sequential / parallel:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
