#!/usr/bin/env bash
# Create .venv and install guardrepro with the hf, mlx, report and dev extras.
# torch is pinned to the CPU build 2.13.0 (a looser pin pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q 'torch==2.13.0'
.venv/bin/python -m pip install -q -e '.[hf,mlx,report,dev]'
# Chromium for the HTML report's browser test (Playwright drives the system binary
# through executable_path, so no browser download). Only when missing; needs apt and
# root (CI); otherwise the test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } \
      || echo "setup: could not install chromium; the HTML browser test will skip" >&2
  else
    echo "setup: chromium not found and apt-get/root unavailable; the HTML browser test will skip" >&2
  fi
fi
