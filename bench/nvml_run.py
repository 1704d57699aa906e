"""The NVML sampler through whole `launchlab run`s on a GPU, next to nvidia-smi's: the same experiment
(`transformers serve` with its continuous-batching KV cache at --cb-max-memory-percent 0.9) run once with
`sampler: {kind: nvml, interval_ms: 5}` and once with the default nvidia-smi sampler (100 ms); prints, per
sampler, the trace's sample interval (median and 95th percentile of the gaps), the samples per run, and the
peak memory.used each saw, with the ratio of the intervals.

    python3 bench/nvml_run.py params/transformers-nvml.yaml      (on the GPU machine: scripts/gpu-nvml.sh)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml


def run(params: Path, sampler: dict, out: Path) -> Path:
    spec = yaml.safe_load(params.read_text())
    spec["sampler"] = sampler
    spec["experiment"] = f"{spec['experiment']}-{sampler['kind']}"
    path = Path(tempfile.mkdtemp()) / f"{spec['experiment']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "launchlab.cli", "run", str(path), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"launchlab run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip())


def figures(run_dir: Path) -> dict:
    runs = pd.read_parquet(run_dir / "runs.parquet")
    samples = pd.read_parquet(run_dir / "telemetry.parquet")
    gaps = (samples.sort_values("t_s").groupby(["run_id", "gpu_index"])["t_s"].diff().dropna() * 1000)
    return {"runs": len(runs), "statuses": ",".join(runs["status"]),
            "samples_per_run": samples.groupby("run_id").size().median(),
            "gap_ms_median": gaps.median(), "gap_ms_p95": gaps.quantile(0.95),
            "peak_mib": runs["peak_mem_used_mib"].max(), "run_dir": run_dir.name}


def main(argv: list[str]) -> int:
    params = Path(argv[0] if argv else "params/transformers-nvml.yaml")
    out = Path(tempfile.mkdtemp(prefix="nvml-run-"))
    rows = {kind: figures(run(params, sampler, out)) for kind, sampler in
            (("nvml", {"kind": "nvml", "interval_ms": 5}), ("nvidia-smi", {"kind": "nvidia-smi", "interval_ms": 100}))}
    print(f"{'sampler':<12}{'runs':>5}  {'status':<12}{'samples/run':>12}{'gap median':>12}{'gap p95':>10}{'peak MiB':>11}")
    for kind, r in rows.items():
        print(f"{kind:<12}{r['runs']:>5}  {r['statuses']:<12}{r['samples_per_run']:>12.0f}{r['gap_ms_median']:>10.1f} ms"
              f"{r['gap_ms_p95']:>7.1f} ms{r['peak_mib']:>11,.0f}")
    ratio = rows["nvidia-smi"]["gap_ms_median"] / rows["nvml"]["gap_ms_median"]
    print(f"NVML samples {ratio:.1f}× as often as nvidia-smi in a whole run; peaks {rows['nvml']['peak_mib']:,.0f} vs "
          f"{rows['nvidia-smi']['peak_mib']:,.0f} MiB")
    print(f"run directories under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
