#!/usr/bin/env bash
# `autotune recheck` of a committed H200 study on today's main, on a fresh lent machine (issue 34's H200 record).
# Usage (repository root, vLLM bundle unpacked to /tmp/site, see shared/h200/README.md):
#   OUT=/path/for/results STUDY=h200-moe30 DB=docs/measurements/h200-moe30/optuna.db MINUTES=8.5 SECONDS_LEFT=540 \
#       bash scripts/h200_recheck.sh
# The study's database is copied first (the recheck stores its record in it; the committed copy stays as it was).
set -uo pipefail
OUT="${OUT:-/tmp/out}"
WORK="${WORK:-/tmp/recheck}"
STUDY="${STUDY:-h200-moe30}"
DB="${DB:-docs/measurements/h200-moe30/optuna.db}"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
cp -f "$DB" "$WORK/optuna.db"
{
    date -u +%FT%TZ
    python3 -c 'import sys, vllm, torch; print("python", sys.version.split()[0]); print("vllm", vllm.__version__);
print("torch", torch.__version__, "cuda", torch.version.cuda); print("gpu", torch.cuda.get_device_name(0))'
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout --signal=INT --kill-after=30 "${SECONDS_LEFT:-540}" \
    python3 -m autotune recheck --study "$STUDY" --storage "sqlite:///$WORK/optuna.db" --workdir "$WORK" --no-mlflow ${SPACE:+--space "$SPACE"} \
        ${MINUTES:+--budget-minutes "$MINUTES"} --json "$OUT/recheck.json" 2>&1 | tr '\r' '\n' | tee "$OUT/recheck.txt"
echo "recheck exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/recheck.txt"
python3 -m autotune report --study "$STUDY" --storage "sqlite:///$WORK/optuna.db" > "$OUT/report-after.txt" 2>&1 || true
cp -f "$WORK/optuna.db" "$OUT/optuna.db" 2>/dev/null || true
(cd "$WORK" && find . -name '*.log' -print0 | tar --null -czf "$OUT/engine-logs.tar.gz" -T -) 2>/dev/null || true
