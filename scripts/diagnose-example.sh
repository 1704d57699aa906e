#!/usr/bin/env bash
# The diagnose route on a GPU machine, as a user meets it: a launch that fails, `launchlab diagnose` of its log on
# this host, and the experiment it drafts, run. After scripts/server-example.sh sglang OUT_DIR has installed SGLang
# there (its parts carried: see that script), in the next call:
#
#   scripts/diagnose-example.sh OUT_DIR FRACTION [SECONDS]
#
#   1. launches SGLang by hand, as the user did, at --mem-fraction-static FRACTION (one it cannot start at) with the
#      model the params name, and keeps its log as OUT_DIR/failing-launch.log (the launch is stopped, its process
#      group killed, once it has failed or after 300 s);
#   2. `launchlab diagnose failing-launch.log --host local` drafts .sglang/drafts/diagnose-here.yaml (the 2×2) and,
#      with --search, .sglang/drafts/diagnose-here-search.yaml (a git-ignored folder: a call keeps it) — both copied
#      to OUT_DIR;
#   3. runs the 2×2 with scripts/server-example.sh for what is left of SECONDS (default 570). Continue it, then the
#      search, with scripts/server-example.sh sglang OUT_DIR .sglang/drafts/diagnose-here[-search].yaml SECONDS.
set -euo pipefail
usage="usage: scripts/diagnose-example.sh OUT_DIR FRACTION [SECONDS]"
out=${1:?$usage}
fraction=${2:?$usage}
budget_s=${3:-570}
started=$(date +%s)
. "$(dirname "$0")/own-folders.sh"
[ -f .sglang/tmp-folder ] || { echo "diagnose-example: SGLang is not installed here: run scripts/server-example.sh sglang first" >&2; exit 1; }
tmp=$(private_tmp .sglang/tmp-folder)
[ -f "$tmp/sglang-example/installed" ] || { echo "diagnose-example: SGLang is not installed in $tmp yet: carry every part" >&2; exit 1; }
model=/tmp/launchlab-sglang-model
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH=$tmp/site:$(pwd)/lib   # server-example.sh adds the rest
export JUPYTER_PATH=$tmp/site/share/jupyter
own_model "$model" > /dev/null
[ -f "$model/config.json" ] || python3 scripts/make_model.py --small "$model"
log=$out/failing-launch.log
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "launching SGLang at --mem-fraction-static $fraction (port $port)"
setsid python3 -m sglang.launch_server --model-path "$model" --host 127.0.0.1 --port "$port" \
  --mem-fraction-static "$fraction" > "$log" 2>&1 < /dev/null &
pid=$!
for _ in $(seq 300); do   # until it exits, or it has said why it cannot start (its other processes may linger)
  kill -0 "$pid" 2> /dev/null || break
  grep -q 'leave no GPU memory\|Not enough memory\|Received sigquit' "$log" && { sleep 5; break; }
  sleep 1
done
kill -TERM -- "-$pid" 2> /dev/null && sleep 10 && kill -KILL -- "-$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
echo "the launch ended after $(( $(date +%s) - started )) s; its last lines:"
tail -n 3 "$log" | cut -c1-300
mkdir -p .sglang/drafts && cp "$log" .sglang/drafts/
python3 -m launchlab.cli diagnose .sglang/drafts/failing-launch.log --host local -o .sglang/drafts/diagnose-here.yaml --force
python3 -m launchlab.cli diagnose .sglang/drafts/failing-launch.log --host local --search \
  -o .sglang/drafts/diagnose-here-search.yaml --force
cp .sglang/drafts/diagnose-here.yaml .sglang/drafts/diagnose-here-search.yaml "$out"/
scripts/server-example.sh sglang "$out" .sglang/drafts/diagnose-here.yaml $(( budget_s - ($(date +%s) - started) ))
