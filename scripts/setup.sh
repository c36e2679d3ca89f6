#!/usr/bin/env bash
# Create .venv and install guardrepro with the hf, mlx, report, dev and ray extras.
# torch is pinned to the CPU build 2.13.0 (a looser pin pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q 'torch==2.13.0'
.venv/bin/python -m pip install -q -e '.[hf,mlx,report,dev,ray]'
