#!/usr/bin/env bash
# Download, into .whl/ (git-ignored), the wheels scripts/gpu-example.sh installs on the GPU machine: the
# kit's notebook stack and `transformers serve`'s extras, for Python 3.12 on x86-64 Linux. Packages that
# machine already has (numpy, pandas, pyarrow, matplotlib, PyYAML, Jinja2, requests, …) are left out to
# stay within what one transfer to a machine without network may carry.
set -euo pipefail
rm -rf .whl && mkdir .whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
  -d .whl papermill nbconvert ipykernel invoke nbclient nbformat jupyter_client regex ahocorasick-rs \
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 openai==1.109.1 opentelemetry-api==1.45.2 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 annotated-doc==0.0.7 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1
cd .whl
rm -f jinja2-* markupsafe-* click-* packaging-* pyyaml-* PyYAML-* requests-* attrs-* certifi-* charset_normalizer-* \
  idna-* urllib3-* tqdm-* python_dateutil-* psutil-* tzdata-*
du -sh .
