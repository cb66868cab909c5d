#!/usr/bin/env bash
# Issue 11's H200 record: one serve-mode study with a p99 TTFT limit and max_num_seqs searched
# (search_spaces/h200-serve-slo.yaml), real vLLM 0.26.0, `vllm serve` + `vllm bench serve` on autotune's prompts.
#
# Usage (repository root as the working directory, vLLM bundle unpacked to /tmp/site, see shared/h200/README.md):
#   OUT=/path/for/results SECONDS_LEFT=540 bash scripts/h200_serve_slo.sh
#
# One device command may run 10 minutes, so the study is stopped with SIGINT after SECONDS_LEFT (autotune keeps
# every finished restart on Ctrl-C) and the same command on the same warm machine resumes it from STUDY_DIR.
# Writes under $OUT: env.txt, tune.txt (as printed), report.json (once the study has finished), optuna.db (a copy
# of the study) and engine-logs.tar.gz (every engine start's log).
set -uo pipefail

OUT="${OUT:-/tmp/out}"
STUDY_DIR="${STUDY_DIR:-/tmp/serve-study}"
SECONDS_LEFT="${SECONDS_LEFT:-540}"
SPACE=search_spaces/h200-serve-slo.yaml
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$STUDY_DIR"
[[ -f "$SPACE" ]] || { echo "h200_serve_slo: run from the repository root ($SPACE not found)" >&2; exit 2; }

{
    date -u +%FT%TZ
    python3 -c 'import sys, vllm, torch; print("python", sys.version.split()[0]); print("vllm", vllm.__version__);
print("torch", torch.__version__, "cuda", torch.version.cuda); print("gpu", torch.cuda.get_device_name(0))'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# Baseline (engine defaults, max_num_seqs 64), max_num_seqs 32 and 16 as trials of one counted restart each (a new
# max_num_seqs is a cold start: ~2 min on the H200), then the best feasible challenger against the baseline on two
# fresh interleaved restarts each. TRIALS=4 adds max_num_seqs 8 (about 3.5 device minutes more).
timeout --signal=INT --kill-after=45 "$SECONDS_LEFT" \
    python3 -m autotune tune --space "$SPACE" --engine vllm --no-mlflow \
        --study h200-serve-slo --storage "sqlite:///$STUDY_DIR/optuna.db" --workdir "$STUDY_DIR" \
        --trials "${TRIALS:-3}" --restarts 1 --enqueue max_num_seqs=32 --enqueue max_num_seqs=16 \
        --enqueue max_num_seqs=8 --no-racing --top-k 1 --verify-restarts 2 --seed 0 \
        --json "$OUT/report.json" 2>&1 | tee -a "$OUT/tune.txt"
echo "tune exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/tune.txt"
cp -f "$STUDY_DIR/optuna.db" "$OUT/optuna.db" 2>/dev/null || true
# The study as it stands (finished or not): every restart with its latency, from the stored study.
python3 -m autotune report --study h200-serve-slo --storage "sqlite:///$STUDY_DIR/optuna.db" \
    --json "$OUT/report-now.json" > "$OUT/report-now.txt" 2>&1 || true
(cd "$STUDY_DIR" && find . -name '*.log' -print0 | tar --null -czf "$OUT/engine-logs.tar.gz" -T -) 2>/dev/null || true
ls -la "$OUT"
