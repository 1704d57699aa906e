#!/usr/bin/env bash
# On a machine with two GPUs: the sampling-resolution and parallel-GPU benchmarks of bench/ (issue 6), results
# into OUT_DIR/bench.txt. Uses the same carried wheels and model as scripts/gpu-example.sh.
set -euo pipefail
out=${1:?usage: scripts/gpu-bench.sh OUT_DIR}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$(pwd)/lib JUPYTER_PATH=/tmp/site/share/jupyter LAUNCHLAB_OUTPUTS=/tmp/launchlab-bench
[ -d /tmp/launchlab-model ] || python3 scripts/make_model.py /tmp/launchlab-model
{
  nvidia-smi -L
  echo "== sampling resolution"; python3 bench/sampling_resolution.py --holds 20 --hold-ms 60
  echo "== parallel GPUs"; python3 bench/parallel_gpus.py params/transformers-kv.yaml 2>/dev/null
} 2>&1 | tee "$out/bench.txt"
