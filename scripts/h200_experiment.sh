#!/usr/bin/env bash
# The H200 reference experiment with real vLLM 0.26.0: an audit of the capture-size trap, then a tuning study.
#
# Usage (repository root as the working directory, vLLM bundle unpacked to /tmp/site, see shared/h200/README.md):
#   OUT=/path/for/results bash scripts/h200_experiment.sh [audit] [tune]      (default: both)
#
# Knobs (environment): TRIALS (6), RESTARTS (2), BUDGET_MINUTES (7: one device command may run 10 minutes),
# STUDY_DIR (/tmp/study), STUDY (h200-dummy). The tune phase resumes a study of the same name in STUDY_DIR, so
# running `tune` again on a warm machine continues where the last call stopped.
#
# Writes under $OUT: audit.txt/.json (configured vs resolved), tune.txt and report.json (the study), optuna.db
# (a copy of the study), engine-logs.tar.gz (every engine start's log), env.txt (versions and GPU).
set -uo pipefail

OUT="${OUT:-/tmp/out}"
STUDY_DIR="${STUDY_DIR:-/tmp/study}"
STUDY="${STUDY:-h200-dummy}"
TRIALS="${TRIALS:-6}"
RESTARTS="${RESTARTS:-2}"
BUDGET_MINUTES="${BUDGET_MINUTES:-7}"
SPACE=search_spaces/h200-dummy.yaml
PHASES=("$@")
[[ ${#PHASES[@]} -eq 0 ]] && PHASES=(audit tune)

export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$STUDY_DIR"

if [[ ! -f "$SPACE" ]]; then
    echo "h200_experiment: run from the repository root ($SPACE not found)" >&2
    exit 2
fi

record_environment() {
    {
        date -u +%FT%TZ
        python3 -c 'import sys, vllm, torch; print("python", sys.version.split()[0]); print("vllm", vllm.__version__);
print("torch", torch.__version__, "cuda", torch.version.cuda); print("gpu", torch.cuda.get_device_name(0))'
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
        python3 -c 'import optuna, scipy, yaml; print("optuna", optuna.__version__)'
    } > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
}

# (1) The trap the field note describes: K=3 speculation with capture sizes [1,2,4,8]. vLLM rounds the sizes to
# multiples of 1+K without a log line ([4,8] on 0.26.0), so 16-token verification batches run without graphs.
# --strict exits 3 when the engine changed anything configured: 3 is the expected result here.
run_audit() {
    python3 -m autotune audit --space "$SPACE" --engine vllm \
        --params cudagraph_mode=FULL_AND_PIECEWISE --params 'capture_sizes=[1,2,4,8]' \
        --params num_speculative_tokens=3 --params draft=small-draft \
        --workdir "$STUDY_DIR/audit" --json "$OUT/audit.json" --strict 2>&1 | tee "$OUT/audit.txt"
    local rc=${PIPESTATUS[0]}
    echo "audit exit status: $rc (3 = the engine changed the configuration, as expected)" | tee -a "$OUT/audit.txt"
}

# (2) The study: baselines (engine defaults without and with speculation), then the Bayesian search. Verification
# is left out here so the study fits one device command; run `autotune tune` again without --no-verify to verify.
run_tune() {
    # SIGINT first: autotune saves finished restarts on Ctrl-C and the same command resumes.
    timeout --signal=INT --kill-after=60 "$(( BUDGET_MINUTES * 60 + 120 ))" \
        python3 -m autotune tune --space "$SPACE" --engine vllm --no-mlflow \
            --study "$STUDY" --storage "sqlite:///$STUDY_DIR/optuna.db" --workdir "$STUDY_DIR" \
            --trials "$TRIALS" --restarts "$RESTARTS" --budget-minutes "$BUDGET_MINUTES" --no-verify \
            --enqueue "${ENQUEUE:-num_speculative_tokens=3,draft=small-draft}" \
            --json "$OUT/report.json" 2>&1 | tee "$OUT/tune.txt"
    local rc=${PIPESTATUS[0]}
    echo "tune exit status: $rc" | tee -a "$OUT/tune.txt"
    cp -f "$STUDY_DIR/optuna.db" "$OUT/optuna.db" 2>/dev/null || true
}

collect_logs() {
    # Engine logs are the evidence for every resolved configuration and failure: keep them all, compressed.
    (cd "$STUDY_DIR" && find . -name '*.log' -print0 | tar --null -czf "$OUT/engine-logs.tar.gz" -T -) 2>/dev/null || true
}

record_environment
for phase in "${PHASES[@]}"; do
    case "$phase" in
        audit) run_audit ;;
        tune) run_tune ;;
        *) echo "h200_experiment: unknown phase '$phase' (use audit, tune)" >&2; exit 2 ;;
    esac
done
collect_logs
ls -la "$OUT"
