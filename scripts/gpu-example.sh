#!/usr/bin/env bash
# The real-GPU example, repeatable: on a GPU machine, from the project root:
#
#   scripts/gpu-example.sh OUT_DIR
#
# installs the carried wheels (.whl/: the kit's notebook stack and what `transformers serve` needs; download
# them with scripts/gpu-wheels.sh) and the project (PYTHONPATH=lib), makes a model with random weights,
# runs `launchlab run params/transformers-kv.yaml`, and packs the run directory into OUT_DIR/run.tar.gz.
# Whatever happens, what exists is packed (a trap), so a run that ends early still brings back its evidence.
# Its files live in a private `mktemp -d` (scripts/own-folders.sh), never under fixed names in the shared /tmp; the
# model goes where the params name it (/tmp/launchlab-model), used only when it is yours.
set -euo pipefail
out=${1:?usage: scripts/gpu-example.sh OUT_DIR}
root=$(pwd)
. "$(dirname "$0")/own-folders.sh"
tmp=$(mktemp -d)
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$tmp/site" .whl/*.whl
export PYTHONPATH=$tmp/site:$root/lib
export JUPYTER_PATH=$tmp/site/share/jupyter   # nbconvert's templates installed with --target
export LAUNCHLAB_OUTPUTS=$tmp/launchlab-outputs
pack() { tar czf "$out/run.tar.gz" -C "$LAUNCHLAB_OUTPUTS" . 2>/dev/null || true; cp "$tmp/gpu-example.log" "$out/" 2>/dev/null || true; }
trap pack EXIT
own_model /tmp/launchlab-model > /dev/null
{
  date -u +%FT%TZ
  [ -f /tmp/launchlab-model/config.json ] || python3 scripts/make_model.py /tmp/launchlab-model
  python3 -m launchlab.cli validate params/transformers-kv.yaml
  time python3 -m launchlab.cli run params/transformers-kv.yaml
  date -u +%FT%TZ
} 2>&1 | tee "$tmp/gpu-example.log"
