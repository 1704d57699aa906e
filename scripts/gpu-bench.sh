#!/usr/bin/env bash
# On a machine with two GPUs: the sampling-resolution and parallel-GPU benchmarks of bench/ (issue 6), results
# into OUT_DIR/bench.txt. Uses the same carried wheels and model as scripts/gpu-example.sh.
# Its files live in a private `mktemp -d` (scripts/own-folders.sh); the model, where the params name it, only if yours.
set -euo pipefail
out=${1:?usage: scripts/gpu-bench.sh OUT_DIR}
. "$(dirname "$0")/own-folders.sh"
tmp=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$tmp/site" .whl/*.whl
export PYTHONPATH=$tmp/site:$(pwd)/lib JUPYTER_PATH=$tmp/site/share/jupyter LAUNCHLAB_OUTPUTS=$tmp/launchlab-bench
own_model /tmp/launchlab-model > /dev/null
[ -f /tmp/launchlab-model/config.json ] || python3 scripts/make_model.py /tmp/launchlab-model
{
  nvidia-smi -L
  echo "== sampling resolution"; python3 bench/sampling_resolution.py --holds 20 --hold-ms 60
  echo "== parallel GPUs"; python3 bench/parallel_gpus.py params/transformers-kv.yaml 2>/dev/null
} 2>&1 | tee "$out/bench.txt"
