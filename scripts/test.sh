#!/usr/bin/env bash
# Set up .venv, chromium for the browser test and the vLLM CPU environment
# .venv-vllm (all idempotent), then run the whole test suite, every tier
# (--all-tiers: the opt-in slow and faults tiers too).
# GUARDREPRO_SKIP_VLLM=1 skips the vLLM environment (its tests then skip with
# the reason). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_browser.sh
if [ "${GUARDREPRO_SKIP_VLLM:-0}" != "1" ]; then
  bash scripts/setup_vllm.sh
fi
exec .venv/bin/python -m pytest -q --all-tiers "$@"
