#!/usr/bin/env bash
# Download, here, what scripts/server-example.sh installs on a GPU machine without network, and cut it
# into parts small enough for one transfer each (at most 64 MiB with the working tree):
#
#   scripts/server-wheels.sh KIND      # KIND: vllm or sglang → .KIND/parts/part-00 … part-NN and SHA256SUMS
#
# scripts/KIND-runtime-wheels.txt names the server and every runtime wheel the image lacks, one `name==version` a
# line, each downloaded with --no-deps: vLLM 0.26.0 and the 66 that sufficed on the H200 (358 MB with the kit's
# stack; jsonschema 4.24 rather than 4.26, see pyproject.toml); SGLang 0.5.17 and the 121 that resolve against the
# image's own packages (1.17 GB; eight of them shadow the image's). Then the kit's notebook
# stack (papermill, nbconvert, ipykernel and what they need that the image lacks), one version of each project:
# the server's pins win; and Debian's `patch`, for a machine without one. PART_MIB overrides the part size (default: what the working tree leaves of 64 MiB).
#
#   scripts/server-wheels.sh --part-size   # only the part size this tree leaves (MiB), or why it leaves too little
set -euo pipefail
usage="usage: scripts/server-wheels.sh vllm|sglang (or --part-size)"
kind=${1:?$usage}
MIN_PART_MIB=16  # below this, 1.2 GB of wheels take over 75 calls: a tree that leaves less is refused, not cut thin

# a call carries the working tree (tracked and untracked files git does not ignore) and one part within 64 MiB:
# each part gets what the tree leaves, less 2 MiB for the carried scripts and params. Outside a git checkout (a
# copy, an unpacked archive) the tree is every file less what .gitignore keeps out of one (build outputs, the
# environment, outputs/, these wheel folders).
tree_bytes() {
  if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    # a tracked file deleted and not yet committed is listed but has no size: stat fails on it (and xargs exits 123,
    # which stopped the script without a word); it is not carried either
    { git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s -- 2>/dev/null || true; } |
      awk '{s += $1} END {print s + 0}'
  else
    find . \( -name .git -o -name .venv -o -name outputs -o -name site -o -name __pycache__ -o -name '.*_cache' \
      -o -name .hypothesis -o -name build -o -name '*.egg-info' -o -name .whl -o -name .vllm -o -name .sglang \) -prune \
      -o -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'
  fi
}
tree=$(tree_bytes)
PART_MIB=${PART_MIB:-$(( (64 * 1048576 - tree) / 1048576 - 2 ))}
if [ "$PART_MIB" -lt "$MIN_PART_MIB" ]; then
  echo "server-wheels: the working tree is $(( tree / 1048576 )) MiB and leaves $PART_MIB MiB of a call's 64 MiB for" \
    "a part; at least $MIN_PART_MIB are needed. Make the tree smaller (large untracked files count too: move them out" \
    "of the checkout) or set PART_MIB." >&2
  exit 2
fi
if [ "$kind" = "--part-size" ]; then
  echo "$PART_MIB"
  exit 0
fi
list=scripts/$kind-runtime-wheels.txt
[ -f "$list" ] || { echo "server-wheels: no $list: KIND is vllm or sglang ($usage)" >&2; exit 2; }
dir=.$kind
dl() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_12_x86_64 \
  --platform manylinux2010_x86_64 --platform any "$@"; }
name_of() { basename "$1" | cut -d- -f1 | tr 'A-Z.-' 'a-z__'; }
rm -rf "$dir/parts" "$dir/kit" && mkdir -p "$dir/wheels" "$dir/kit" "$dir/parts"
# the wheels already here that the list names are kept (a second run downloads nothing new)
grep -v '^#' "$list" > "$dir/wanted.txt"
dl --no-deps -d "$dir/wheels" -r "$dir/wanted.txt"
dl -d "$dir/kit" papermill nbconvert ipykernel nbclient nbformat jupyter_client ahocorasick-rs 'jsonschema<4.25'
# what the image has (its package list) or the server's list already pins stays out
have=" jinja2 markupsafe click packaging pyyaml requests attrs certifi charset_normalizer idna urllib3 tqdm \
python_dateutil psutil tzdata six pygments regex numpy pandas pyarrow matplotlib setuptools filelock fsspec \
typing_extensions anyio h11 httpx httpcore aiohttp aiosignal frozenlist multidict yarl propcache \
aiohappyeyeballs wrapt "
for w in "$dir"/wheels/*.whl; do have+="$(name_of "$w") "; done
for w in "$dir"/kit/*.whl; do
  case "$have" in *" $(name_of "$w") "*) rm "$w" ;; *) mv "$w" "$dir/wheels/" ;; esac
done
rmdir "$dir/kit"
# `patch` (params' patches: applied on the host) may be missing from the machine's image: Debian's, unpacked there
rm -rf "$dir/debs" && mkdir -p "$dir/debs" && (cd "$dir/debs" && apt-get download patch > /dev/null)
tar cf "$dir/bundle.tar" -C "$dir" wheels debs
split -b "${PART_MIB}m" -d "$dir/bundle.tar" "$dir/parts/part-"
(cd "$dir/parts" && sha256sum part-* > SHA256SUMS)
rm "$dir/bundle.tar"
echo "$(ls "$dir/wheels" | wc -l) wheels, $(du -sh "$dir/wheels" | cut -f1), in $(ls "$dir/parts" | grep -c '^part-')" \
  "parts of $PART_MIB MiB under $dir/parts"
