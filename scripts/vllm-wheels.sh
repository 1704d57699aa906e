#!/usr/bin/env bash
# Download, here, what scripts/vllm-example.sh installs on the lent GPU machine (no network there), and cut it
# into parts a device call may carry (at most 64 MiB with the working tree):
#
#   scripts/vllm-wheels.sh            # → .vllm/parts/part-00 … part-NN and SHA256SUMS (git-ignored), 358 MB in all
#
# vLLM 0.26.0 itself (304 MB: it pins torch 2.11.0 and torchvision 0.26.0, exactly the image's), the runtime
# wheels the image lacks (scripts/vllm-0.26-runtime-wheels.txt: the 66 that sufficed on the H200, each with
# --no-deps; jsonschema 4.24 rather than 4.26, see pyproject.toml) and the kit's notebook stack (papermill,
# nbconvert, ipykernel and what they need that the image lacks), one version of each project (vLLM's pins win).
set -euo pipefail
# a call carries the working tree (tracked and untracked files) and one part within 64 MiB: each part gets what
# the tree leaves, less 2 MiB for the carried scripts and params
tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
PART_MIB=${PART_MIB:-$(( (64 * 1048576 - tree) / 1048576 - 2 ))}
dl() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform any "$@"; }
export -f dl
name_of() { basename "$1" | cut -d- -f1 | tr 'A-Z.-' 'a-z__'; }
rm -rf .vllm && mkdir -p .vllm/wheels .vllm/kit .vllm/parts
dl --no-deps -d .vllm/wheels vllm==0.26.0
grep -v '^#' scripts/vllm-0.26-runtime-wheels.txt | xargs -n 200 bash -c 'dl --no-deps -d .vllm/wheels "$@"' dl
dl -d .vllm/kit papermill nbconvert ipykernel nbclient nbformat jupyter_client ahocorasick-rs 'jsonschema<4.25'
# what the image has (shared/gpu/README.md, the device's KINDS.md) or vLLM's list already pins stays out
have=" jinja2 markupsafe click packaging pyyaml requests attrs certifi charset_normalizer idna urllib3 tqdm \
python_dateutil psutil tzdata six pygments regex numpy pandas pyarrow matplotlib setuptools filelock fsspec \
typing_extensions anyio h11 httpx httpcore aiohttp aiosignal frozenlist multidict yarl propcache \
aiohappyeyeballs wrapt "
for w in .vllm/wheels/*.whl; do have+="$(name_of "$w") "; done
for w in .vllm/kit/*.whl; do
  case "$have" in *" $(name_of "$w") "*) rm "$w" ;; *) mv "$w" .vllm/wheels/ ;; esac
done
rmdir .vllm/kit
tar cf .vllm/bundle.tar -C .vllm wheels
split -b "${PART_MIB}m" -d .vllm/bundle.tar .vllm/parts/part-
(cd .vllm/parts && sha256sum part-* > SHA256SUMS)
rm .vllm/bundle.tar
ls .vllm/wheels | wc -l; du -sh .vllm/wheels; ls -la .vllm/parts
