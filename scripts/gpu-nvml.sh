#!/usr/bin/env bash
# On a GPU machine: bench/nvml_run.py (the NVML sampler through whole `launchlab run`s next to
# nvidia-smi's), results into OUT_DIR/nvml.txt. Same carried wheels and model as scripts/gpu-example.sh.
# Its files live in a private `mktemp -d` (scripts/own-folders.sh); the model, where the params name it, only if yours.
set -euo pipefail
out=${1:?usage: scripts/gpu-nvml.sh OUT_DIR}
. "$(dirname "$0")/own-folders.sh"
tmp=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$tmp/site" .whl/*.whl
export PYTHONPATH=$tmp/site:$(pwd)/lib JUPYTER_PATH=$tmp/site/share/jupyter PYTHONUNBUFFERED=1
own_model /tmp/launchlab-model > /dev/null
[ -f /tmp/launchlab-model/config.json ] || python3 scripts/make_model.py /tmp/launchlab-model
{
  date -u +%FT%TZ; nvidia-smi -L; python3 -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?')"
  python3 -m launchlab.cli validate params/transformers-nvml.yaml
  time python3 bench/nvml_run.py params/transformers-nvml.yaml
  date -u +%FT%TZ
} 2>&1 | tee "$out/nvml.txt"
