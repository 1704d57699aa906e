#!/usr/bin/env bash
# A real server (vLLM 0.26 or SGLang 0.5.17) under the kit on a GPU machine without network,
# repeatable. First, here:
#
#   scripts/server-wheels.sh KIND     # the server, its runtime wheels and the kit's notebook stack → .KIND/parts/
#
# then on the machine, from the project root, one command after the other while the machine keeps its files
# (it keeps /tmp only 30 s after a call), each carrying one part (.KIND/parts/part-NN and .KIND/parts/SHA256SUMS):
#
#   scripts/server-example.sh KIND OUT_DIR [PARAMS [SECONDS]]
#
# Every call does what it can with what has arrived, in a private folder (TMP below: a `mktemp -d` of the first call,
# 0700, named in .KIND/tmp-folder for the next calls; scripts/own-folders.sh) — never in fixed /tmp names another
# user could make first and fill:
#   1. copies the carried parts to TMP/KIND-parts;
#   2. once every part SHA256SUMS names (part-NN, nothing else) is there and checks: installs the wheels into
#      TMP/site (first on PYTHONPATH, so SGLang's pins shadow the image's numpy, transformers, …) and makes the model
#      (scripts/make_model.py --small → /tmp/launchlab-KIND-model, where the params name it: used only when it is
#      yours); a part that does not match SHA256SUMS (it is removed: carry it again) or a wheel pip cannot install
#      stops the call with a line naming it, and exit 1;
#   3. with PARAMS, once installed: runs `launchlab run PARAMS`, or continues with --resume the batch an earlier
#      call stopped, and stops it (SIGINT: the runs in flight are recorded as interrupted) so that the whole
#      call ends within SECONDS (default 560; a command there may be limited to 600 s);
#   4. whatever happens (a trap), packs the run directory into OUT_DIR/<params stem>.tar.gz, with this call's
#      log beside it, so a batch that ends early still brings back its evidence.
# Two-GPU experiments (params/vllm-custom-ar-tp2*.yaml) are the same calls on the kind nvidia-h200-x2; the script
# itself does not depend on the number of GPUs (the params' host says `gpus: 2`).
# SERVER_PARTS names another folder of parts (default .KIND/parts); SERVER_EXAMPLE_TMP the private folder itself (made
# 0700; refused unless it is yours alone), the model then inside it too (tests/test_server_example_script.py).
set -euo pipefail
usage="usage: scripts/server-example.sh vllm|sglang OUT_DIR [PARAMS [SECONDS]]"
kind=${1:?$usage}
out=${2:?$usage}
params=${3:-}
budget_s=${4:-560}
case "$kind" in vllm|sglang) ;; *) echo "server-example: unknown server kind '$kind'; $usage" >&2; exit 2 ;; esac
parts=${SERVER_PARTS:-.$kind/parts}
. "$(dirname "$0")/own-folders.sh"
if [ -n "${SERVER_EXAMPLE_TMP:-}" ]; then
  tmp=$SERVER_EXAMPLE_TMP model=$SERVER_EXAMPLE_TMP/launchlab-$kind-model
  own_folder "$tmp" made || exit 1
else
  tmp=$(private_tmp ".$kind/tmp-folder") model=/tmp/launchlab-$kind-model   # the params name the model there
fi
vch=$tmp/$kind-parts site=$tmp/site state=$tmp/$kind-example
root=$(pwd)
started=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export PYTHONPATH=$site:$root/lib PATH=$PATH:$tmp/debroot/usr/bin
export JUPYTER_PATH=$site/share/jupyter   # nbconvert's templates and the kernel spec, installed with --target
mkdir -p "$vch" "$state"
log=$state/call-$started.log
WAITING=3   # install's status while parts are still to come: not a failure

receive() {
  [ -d "$parts" ] || return 0
  cp "$parts"/* "$vch"/ 2>/dev/null || true
  local want have
  want=$(wc -l < "$vch"/SHA256SUMS 2>/dev/null || echo "?")
  have=$(ls "$vch" | grep -c '^part-' || true)
  echo "parts on the machine: $have of $want"
}

fail() { echo "server-example: $*" >&2; return 1; }

# Called as `install || rc=$?`, so bash ignores `set -e` inside it: every step is checked on its own line.
install() {
  if [ -f "$state/installed" ]; then echo "$kind installed in $site"; return 0; fi
  [ -f "$vch"/SHA256SUMS ] || { echo "no SHA256SUMS yet: carry the parts"; return $WAITING; }
  local missing bad strange
  # SHA256SUMS is carried like the parts: it names part-NN files and nothing else (a name such as ../x or /home/…
  # would have sha256sum read, and the clean-up below remove, a file outside the parts)
  if grep -Evq '^[0-9a-f]{64}  part-[0-9]+$' "$vch"/SHA256SUMS; then
    fail "SHA256SUMS must hold only lines '<sha256>  part-NN', as scripts/server-wheels.sh writes them; it has" \
      "$(grep -Ev '^[0-9a-f]{64}  part-[0-9]+$' "$vch"/SHA256SUMS | head -n 1 | cut -c1-120 | tr -d '\000-\037');" \
      "carry the SHA256SUMS that server-wheels.sh made; nothing installed or removed"
    return
  fi
  missing=$(cd "$vch" && awk '{print $2}' SHA256SUMS | while read -r p; do [ -f "$p" ] || echo "$p"; done)
  [ -z "$missing" ] || { echo "still to carry:" $missing; return $WAITING; }
  bad=$(cd "$vch" && sha256sum -c SHA256SUMS 2>/dev/null | awk -F': ' '$NF != "OK" {print $1}' | grep -E '^part-[0-9]+$')
  if [ -n "$bad" ]; then
    (cd "$vch" && for p in $bad; do rm -f -- "./$p"; done)
    fail "carried parts that do not match SHA256SUMS: $(echo $bad) (removed from $vch: carry them again); nothing" \
      "installed"
    return
  fi
  rm -rf "$tmp/vw" && mkdir -p "$tmp/vw" || { fail "cannot make $tmp/vw"; return; }
  cat "$vch"/part-* | tar x -C "$tmp/vw" || { fail "the parts do not untar (see above); nothing installed"; return; }
  if ! python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$tmp"/vw/wheels/*.whl > "$state/pip.log" 2>&1; then
    grep -v 'already exists' "$state/pip.log" | tail -n 20
    local w
    for w in "$tmp"/vw/wheels/*.whl; do   # which wheel: one pip of each, into a scratch folder, until one fails
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$tmp/vw/one" "$w" \
        > /dev/null 2>&1 || { rm -rf "$tmp/vw"; fail "pip cannot install $(basename "$w") (pip's last lines" \
                                   "above, all in $state/pip.log); $kind is not installed"; return; }
      rm -rf "$tmp/vw/one"
    done
    rm -rf "$tmp/vw"
    fail "pip could not install the wheels (its last lines above, all in $state/pip.log); $kind is not installed"
    return
  fi
  grep -v 'already exists' "$state/pip.log" || true
  for deb in "$tmp"/vw/debs/*.deb; do   # `patch`, for params' patches, where the image has none
    [ -e "$deb" ] || continue
    command -v "$(basename "$deb" | cut -d_ -f1)" > /dev/null || dpkg -x "$deb" "$tmp/debroot" \
      || { rm -rf "$tmp/vw"; fail "cannot unpack $(basename "$deb")"; return; }
  done
  rm -rf "$tmp/vw"
  [ -f "$site/$kind/__init__.py" ] || { fail "pip installed no $kind package into $site"; return; }
  touch "$state/installed"
  echo "installed $(ls "$site" | grep -c dist-info) packages into $site"
}

experiment() {
  local run_dir rc limit
  stem=$(basename "$params" .yaml)
  outs=$tmp/launchlab-outputs/$stem
  # stem and outs are global: the EXIT trap runs after this function has returned
  pack() { tar czf "$out/$stem.tar.gz" -C "$outs" . 2>/dev/null || true; }
  trap pack EXIT
  if [ -f "$state/$stem.done" ]; then echo "$params: finished in an earlier call"; return 0; fi
  own_model "$model" > /dev/null || return 1
  [ -f "$model/config.json" ] || python3 scripts/make_model.py --small "$model"
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
  [ "$rc" != 0 ] || touch "$state/$stem.done"
}

{
  date -u +%FT%TZ
  receive
  rc=0
  install || rc=$?
  if [ "$rc" = 0 ] && [ -n "$params" ]; then experiment; fi
  date -u +%FT%TZ
  [ "$rc" = 0 ] || [ "$rc" = "$WAITING" ] || exit 1   # the install failed: this call ends with the log copied
} 2>&1 | tee "$log" || status=$?
cp "$log" "$out/"
exit "${status:-0}"
