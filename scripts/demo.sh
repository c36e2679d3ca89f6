#!/usr/bin/env bash
# Set up .venv (idempotent) and run the whole pipeline on the embedded toy guard.
# Extra arguments go to `guardrepro demo` (e.g. --out runs/my-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/guardrepro demo "$@"
