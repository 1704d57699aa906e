#!/usr/bin/env bash
# vLLM 0.26 for real on the lent GPU machine (see shared/gpu/README.md), repeatable. First, here:
#
#   scripts/vllm-wheels.sh      # vLLM, its runtime wheels and the kit's notebook stack → .vllm/parts/part-NN
#
# then on the machine, from the project root, one device call after the other while the machine stays warm
# (it keeps /tmp only 30 s after a call), each carrying one part (.vllm/parts/part-NN and .vllm/parts/SHA256SUMS):
#
#   scripts/vllm-example.sh OUT_DIR [PARAMS [SECONDS]]
#
# Every call does what it can with what has arrived:
#   1. copies the carried parts to /tmp/vch;
#   2. once every part SHA256SUMS names is there and checks: installs the wheels into /tmp/site and makes the
#      model (scripts/make_model.py --small → /tmp/launchlab-vllm-model);
#   3. with PARAMS, once installed: runs `launchlab run PARAMS`, or continues with --resume the batch an earlier
#      call stopped, and stops it (SIGINT: the runs in flight are recorded as interrupted) so that the whole
#      call ends within SECONDS (default 560; a device call runs at most 600 s);
#   4. whatever happens (a trap), packs the run directory into OUT_DIR/<params stem>.tar.gz, with this call's
#      log beside it, so a batch that ends early still brings back its evidence.
# VLLM_PARTS names another folder of parts (default .vllm/parts).
set -euo pipefail
out=${1:?usage: scripts/vllm-example.sh OUT_DIR [PARAMS [SECONDS]]}
params=${2:-}
budget_s=${3:-560}
parts=${VLLM_PARTS:-.vllm/parts}
root=$(pwd)
started=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export PYTHONPATH=/tmp/site:$root/lib
export JUPYTER_PATH=/tmp/site/share/jupyter   # nbconvert's templates and the kernel spec, installed with --target
mkdir -p /tmp/vch /tmp/vllm-example
log=/tmp/vllm-example/call-$started.log

receive() {
  [ -d "$parts" ] || return 0
  cp "$parts"/* /tmp/vch/ 2>/dev/null || true
  local want have
  want=$(wc -l < /tmp/vch/SHA256SUMS 2>/dev/null || echo "?")
  have=$(ls /tmp/vch | grep -c '^part-' || true)
  echo "parts on the machine: $have of $want"
}

install() {
  if [ -f /tmp/site/vllm/__init__.py ]; then echo "vLLM installed in /tmp/site"; return 0; fi
  [ -f /tmp/vch/SHA256SUMS ] || { echo "no SHA256SUMS yet: carry the parts"; return 1; }
  local missing
  missing=$(cd /tmp/vch && awk '{print $2}' SHA256SUMS | while read -r p; do [ -f "$p" ] || echo "$p"; done)
  [ -z "$missing" ] || { echo "still to carry:" $missing; return 1; }
  (cd /tmp/vch && sha256sum --quiet -c SHA256SUMS)
  rm -rf /tmp/vw && mkdir -p /tmp/vw
  cat /tmp/vch/part-* | tar x -C /tmp/vw
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    /tmp/vw/wheels/*.whl 2>&1 | grep -v 'already exists' || true
  rm -rf /tmp/vw
  [ -f /tmp/site/vllm/__init__.py ] && echo "installed $(ls /tmp/site | grep -c dist-info) packages into /tmp/site"
}

experiment() {
  local run_dir rc limit
  stem=$(basename "$params" .yaml)
  outs=/tmp/launchlab-outputs/$stem
  # stem and outs are global: the EXIT trap runs after this function has returned
  pack() { tar czf "$out/$stem.tar.gz" -C "$outs" . 2>/dev/null || true; }
  trap pack EXIT
  if [ -f "/tmp/vllm-example/$stem.done" ]; then echo "$params: finished in an earlier call"; return 0; fi
  [ -d /tmp/launchlab-vllm-model ] || python3 scripts/make_model.py --small /tmp/launchlab-vllm-model
  python3 -m launchlab.cli validate "$params"
  run_dir=$(ls -d "$outs"/*/*/ 2>/dev/null | head -1 || true)
  local resume=()
  [ -z "$run_dir" ] || resume=(--resume "${run_dir%/}" --stop-leftovers)
  limit=$(( budget_s - ($(date +%s) - started) - 45 ))   # leaves time to stop the run in flight and pack
  echo "launchlab run $params ${resume[*]} for at most $limit s"
  set +e
  time timeout -s INT -k 60 "$limit" python3 -m launchlab.cli run "$params" --out "$outs" "${resume[@]}"
  rc=$?
  set -e
  echo "launchlab run exited $rc"
  [ "$rc" != 0 ] || touch "/tmp/vllm-example/$stem.done"
}

{
  date -u +%FT%TZ
  receive
  if install && [ -n "$params" ]; then experiment; fi
  date -u +%FT%TZ
} 2>&1 | tee "$log" || status=$?
cp "$log" "$out/"
exit "${status:-0}"
