#!/usr/bin/env bash
# A short H200 study under a minutes budget (what the end of a session's device time allows; issue 9's record asks
# for 20 minutes): search_spaces/h200-dummy.yaml, real vLLM 0.26.0, restarts forked from the forkserver.
# Shows on real hardware what the study's own cold-start test says, and how a minutes budget is priced per kind of start.
#
# Usage (repository root, vLLM bundle unpacked to /tmp/site, see shared/h200/README.md):
#   OUT=/path/for/results MINUTES=8 SECONDS_LEFT=480 bash scripts/h200_budget_probe.sh
# Run it again with the same STUDY and STUDY_DIR to resume the study (a study longer than one 10-minute device call:
# the time limit interrupts it with SIGINT, which keeps every restart that landed, and the next call goes on).
# SPACE picks another space (default search_spaces/h200-dummy.yaml; search_spaces/h200-moe.yaml is issue 21's MoE
# target). TUNE_ARGS adds flags to tune (e.g. --trials 4 --enqueue ...). PART names this call's files under $OUT (tune-<PART>.txt); ENGINE=sim tries the script without a GPU.
# PACK_CACHES=1 packs the workdir caches into $OUT (scripts/h200_study_caches.sh) and CACHES_FROM=DIR unpacks them
# into a fresh machine's workdir first: a study longer than one session's device time keeps its warm caches.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
STUDY_DIR="${STUDY_DIR:-/tmp/budget-study}"
STUDY="${STUDY:-h200-budget}"
PART="${PART:-}"
TUNE_TXT="$OUT/tune${PART:+-$PART}.txt"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$STUDY_DIR"
# CACHES_FROM=DIR: a fresh machine resuming the study gets the workdir caches an earlier call packed
# (scripts/h200_study_caches.sh), so its configurations' first starts are warm, as on the machine that ran them.
if [[ -n "${CACHES_FROM:-}" ]] && compgen -G "$CACHES_FROM/caches.tgz.*" >/dev/null; then
    bash scripts/h200_study_caches.sh unpack "$STUDY_DIR" "$CACHES_FROM"
fi
{
    date -u +%FT%TZ
    python3 -c 'import sys, vllm, torch; print("python", sys.version.split()[0]); print("vllm", vllm.__version__);
print("torch", torch.__version__, "cuda", torch.version.cuda); print("gpu", torch.cuda.get_device_name(0))'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout --signal=INT --kill-after=30 "${SECONDS_LEFT:-480}" \
    python3 -m autotune tune --space "${SPACE:-search_spaces/h200-dummy.yaml}" --engine "${ENGINE:-vllm}" --no-mlflow \
        --study "$STUDY" --storage "sqlite:///$STUDY_DIR/optuna.db" --workdir "$STUDY_DIR" \
        --budget-minutes "${MINUTES:-8}" --seed 0 ${TUNE_ARGS:-} --json "$OUT/report.json" 2>&1 | tr '\r' '\n' | grep -v '^trials:' \
        | tee "$TUNE_TXT"
echo "tune exit status: ${PIPESTATUS[0]}" | tee -a "$TUNE_TXT"
python3 -m autotune report --study "$STUDY" --storage "sqlite:///$STUDY_DIR/optuna.db" \
    --json "$OUT/report-now.json" > "$OUT/report-now.txt" 2>&1 || true
cp -f "$STUDY_DIR/optuna.db" "$OUT/optuna.db" 2>/dev/null || true
(cd "$STUDY_DIR" && find . -name '*.log' -print0 | tar --null -czf "$OUT/engine-logs.tar.gz" -T -) 2>/dev/null || true
# PACK_CACHES=1: the workdir caches come back too, for the next machine (CACHES_FROM). At most 8 files come back
# from $OUT, so the text outputs go into one results.tar.gz beside optuna.db and the cache parts.
if [[ "${PACK_CACHES:-0}" == 1 ]]; then
    (cd "$OUT" && tar -czf results.tar.gz --remove-files -- *.txt *.json engine-logs.tar.gz 2>/dev/null) || true
    bash scripts/h200_study_caches.sh pack "$STUDY_DIR" "$OUT" || true
fi
