#!/usr/bin/env bash
# Install Debian's chromium for the HTML report's browser test (Playwright drives the
# system binary through executable_path, so no browser download). Idempotent: only
# when missing; needs apt-get and root (as on CI); otherwise the test skips and says why.
set -euo pipefail
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
