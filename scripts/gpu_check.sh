#!/usr/bin/env bash
# One call on one GPU (H200), no network, under 8 minutes:
#   bash scripts/gpu_check.sh OUT_DIR            # the check
#   bash scripts/gpu_check.sh --dry-run OUT_DIR  # print the plan, check its inputs here
#
# Stages (each with its own time limit; the whole is bounded by their sum, 7.5 min):
#   1. synthetic  scripts/bench_synthetic.py --shape qwen2.5-7b (Qwen2.5-7B-Instruct's
#                 config, random weights: vLLM load_format="dummy", nothing downloaded),
#                 256 rows with the published length profile, runners/vllm-bf16.toml's
#                 engine settings (bf16, prefix caching, batch-invariant kernels,
#                 max_num_seqs 32, 16k tokens per step); then the first SAMPLE rows
#                 (default 16) one request at a time: batch 1 vs batched identity.
#   2. toy run    `guardrepro run` of the shipped toy guard's 256-row cohort with
#                 runners/toy-vllm.toml on the GPU (device cuda, batches of 64),
#                 timed end to end;
#   3. toy gate   `guardrepro gate` of that run against checks/toy-guard.toml.
# Then one summary (cohort generation seconds, end-to-end seconds, tokens/s, memory,
# identity counts) on stdout and in OUT_DIR/gpu_check.json; every stage's own JSON
# and log beside it.
#
# Before anything runs, the preflight lists everything missing (a Python with CUDA
# torch, vllm, transformers; a CUDA device; this tree's files) and exits 2 with that
# list, so what to bring is known at once. Environment: PYTHON (default python3),
# SAMPLE (16), ROWS (256), TOY_MATRIX=1 to also run the older per-configuration toy
# matrix (scripts/gpu_check.py: transformers and vLLM, fp32/bf16; adds minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/gpu_check.sh [--dry-run] OUT_DIR" >&2
  exit 2
fi
OUT_DIR=$1
PY=${PYTHON:-python3}
SAMPLE=${SAMPLE:-16}
ROWS=${ROWS:-256}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export GUARDREPRO_HOME="$OUT_DIR/home"
unset VLLM_BATCH_INVARIANT VLLM_ENABLE_V1_MULTIPROCESSING
mkdir -p "$OUT_DIR"

# name, time limit (s), command: the plan, printed by --dry-run and run in order
STAGES=(synthetic toy-run toy-gate)
LIMIT_synthetic=270
LIMIT_toy_run=150
LIMIT_toy_gate=30
CMD_synthetic="$PY scripts/bench_synthetic.py --shape qwen2.5-7b --rows $ROWS --backends vllm --vllm-python $PY --vllm-options runners/vllm-bf16.toml --sample $SAMPLE --json $OUT_DIR/synthetic.json"
CMD_toy_run="$PY -m guardrepro run --profile $OUT_DIR/toy-vllm-gpu.toml --cohort $OUT_DIR/toy-cohort.jsonl --out $OUT_DIR/toy-run --no-progress"
CMD_toy_gate="$PY -m guardrepro gate $OUT_DIR/toy-run --spec checks/toy-guard.toml --out $OUT_DIR/toy-gate --json"

# --- inputs in this tree (checked in both modes) ---------------------------------
missing=()
for f in scripts/bench_synthetic.py scripts/synthetic/run_vllm.py runners/vllm-bf16.toml \
         runners/toy-vllm.toml checks/toy-guard.toml cohorts/toy-64.toml \
         locks/toy-guard.toml locks/toy-bench.toml guardrepro/data/toy_guard/config.json; do
  [ -f "$f" ] || missing+=("file $f (this tree is incomplete)")
done
# the toy profile on the GPU: runners/toy-vllm.toml with device cuda, batches of 64,
# lock paths made absolute so the copy may live in OUT_DIR
sed -e "s#\"\.\./locks/#\"$ROOT/locks/#g" -e 's/^device = "cpu"/device = "cuda"/' \
    -e 's/^batch_size = 16/batch_size = 64/' -e 's/^max_num_seqs = 16/max_num_seqs = 64/' \
    -e '/^cpu_kvcache_space_gib/d' -e 's/^name = "toy-vllm"/name = "toy-vllm-gpu"/' \
    runners/toy-vllm.toml >"$OUT_DIR/toy-vllm-gpu.toml" 2>/dev/null \
  || missing+=("a writable OUT_DIR ($OUT_DIR)")

# --- the Python on this machine ---------------------------------------------------
probe=$("$PY" - <<'EOF2' 2>&1
import importlib
for name in ("torch", "transformers", "vllm", "guardrepro", "click", "safetensors"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        print(f"missing: python package {name} ({type(exc).__name__}: {exc})")
try:
    import torch
    if not torch.cuda.is_available():
        print("missing: a CUDA device visible to torch (torch.cuda.is_available() is False)")
    else:
        cc = torch.cuda.get_device_capability(0)
        print(f"device: {torch.cuda.get_device_name(0)} cc {cc[0]}.{cc[1]}")
        if cc < (8, 0):
            print("missing: compute capability >= 8.0 (vllm-bf16 requires batch invariance)")
except Exception:  # noqa: BLE001
    pass
EOF2
) || probe="missing: a working $PY ($probe)"
while IFS= read -r line; do
  case "$line" in missing:*) missing+=("${line#missing: }");; device:*) echo "gpu_check: ${line}" >&2;; esac
done <<<"$probe"

if [ "$DRY" = "1" ]; then
  echo "gpu_check plan (OUT_DIR=$OUT_DIR, python $PY):"
  for s in "${STAGES[@]}"; do
    v=CMD_${s//-/_}; l=LIMIT_${s//-/_}
    echo "  [$s, limit ${!l} s] ${!v}"
  done
  echo "  [summary] $PY scripts/gpu_check_summary.py $OUT_DIR"
  # what can be checked without a GPU: the synthetic 7B shape and cohort, the
  # profiles, the generated toy GPU profile, the gate spec and the toy cohort
  if "$PY" scripts/bench_synthetic.py --shape qwen2.5-7b --rows "$ROWS" \
       --vllm-python "$PY" --vllm-options runners/vllm-bf16.toml --sample "$SAMPLE" --plan \
       >"$OUT_DIR/dry-synthetic.txt" 2>&1; then
    sed 's/^/  /' "$OUT_DIR/dry-synthetic.txt"
  else
    missing+=("a working bench_synthetic --plan (see $OUT_DIR/dry-synthetic.txt)")
  fi
  "$PY" scripts/gpu_check_summary.py --check-inputs "$OUT_DIR" >"$OUT_DIR/dry-inputs.txt" 2>&1 \
    || missing+=("valid toy profile, gate spec and cohort (see $OUT_DIR/dry-inputs.txt)")
  sed 's/^/  /' "$OUT_DIR/dry-inputs.txt"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "on this machine, missing for a real run:"
    printf '  - %s\n' "${missing[@]}"
  fi
  echo "dry run: plan printed, inputs checked; nothing was run on a GPU"
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_check: cannot run; bring:" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  "$PY" -c 'import json,sys; print(json.dumps({"status": "unavailable", "missing": sys.argv[1:]}, indent=2))' \
    "${missing[@]}" >"$OUT_DIR/gpu_check.json" 2>/dev/null
  exit 2
fi

"$PY" scripts/gpu_check_summary.py --check-inputs "$OUT_DIR" >"$OUT_DIR/inputs.log" 2>&1 || {
  echo "gpu_check: inputs invalid (see $OUT_DIR/inputs.log)" >&2; exit 2; }
failed=()
for s in "${STAGES[@]}"; do
  v=CMD_${s//-/_}; l=LIMIT_${s//-/_}
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # the command is a word list by construction
  timeout "${!l}" ${!v} >"$OUT_DIR/$s.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "{\"stage\": \"$s\", \"rc\": $rc, \"wall_s\": $(echo "$end - $start" | bc)}" >>"$OUT_DIR/stages.jsonl"
  if [ $rc -ne 0 ]; then
    echo "gpu_check: $s FAILED rc=$rc (see $OUT_DIR/$s.log)" >&2
    tail -5 "$OUT_DIR/$s.log" >&2
    failed+=("$s")
    [ "$s" = "toy-run" ] && break  # nothing to gate
  else
    echo "gpu_check: $s done" >&2
  fi
done
if [ "${TOY_MATRIX:-0}" = "1" ]; then
  for config in hf-fp32 hf-bf16 vllm-fp32 vllm-bf16 vllm-bf16-invariant; do
    "$PY" scripts/gpu_check.py run --config "$config" --out "$OUT_DIR/config-$config.json" \
      --work "$OUT_DIR/work" >"$OUT_DIR/$config.log" 2>&1 || failed+=("$config")
  done
  "$PY" scripts/gpu_check.py summarize --dir "$OUT_DIR" --out "$OUT_DIR/toy-matrix.json" \
    >"$OUT_DIR/toy-matrix.txt" 2>&1 || failed+=("toy-matrix")
fi
echo "== gpu_check summary =="
"$PY" scripts/gpu_check_summary.py "$OUT_DIR" "${failed[@]}"
