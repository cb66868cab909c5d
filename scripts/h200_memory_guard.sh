#!/usr/bin/env bash
# Issue 20's H200 record: memory and KV facts per restart on real vLLM, what the memory guard's sampling costs, and
# a memory hog started during a real vLLM start tripping the guard's floor (docs/measurements/h200-memory-guard.md).
#
# Usage (repository root, vLLM bundle unpacked to /tmp/site, see shared/h200/README.md):
#   OUT=/path PART=facts SECONDS_LEFT=450 bash scripts/h200_memory_guard.sh   # doctor + a study over capture settings
#   OUT=/path PART=hog   SECONDS_LEFT=450 bash scripts/h200_memory_guard.sh   # the floor set high, a hog mid-start
# PART=facts again resumes its study (a SIGINT from the time limit keeps every restart that landed).
# ENGINE=sim tries the script without a GPU.
set -uo pipefail
OUT="${OUT:-/tmp/out}"
PART="${PART:-facts}"
WORK="${WORK:-/tmp/mem20}"
ENGINE="${ENGINE:-vllm}"
PY="${PY:-python3}"
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
{
    date -u +%FT%TZ
    python3 -c 'import sys, vllm, torch; print("python", sys.version.split()[0]); print("vllm", vllm.__version__);
print("torch", torch.__version__, "cuda", torch.version.cuda); print("gpu", torch.cuda.get_device_name(0))'
    grep -E 'MemTotal|MemAvailable|^Cached' /proc/meminfo
} > "$OUT/env-$PART.txt" 2>&1
cat "$OUT/env-$PART.txt"

report() {  # study name, file stem
    "$PY" -m autotune report --study "$1" --storage "sqlite:///$WORK/optuna.db" --json "$OUT/$2.json" \
        > "$OUT/$2.txt" 2>&1 || true
    cp -f "$WORK/optuna.db" "$OUT/optuna.db" 2>/dev/null || true
    "$PY" scripts/h200_facts_table.py "$OUT/$2.json" | tee "$OUT/$2-facts.txt"
}

if [[ "$PART" == "facts" ]]; then
    "$PY" -m autotune doctor --space search_spaces/h200-dummy.yaml > "$OUT/doctor.txt" 2>&1
    echo "doctor exit status: $?" >> "$OUT/doctor.txt"
    cat "$OUT/doctor.txt"
    # Capture settings side by side (the baselines, engine defaults with and without ngram K=3, come first on their
    # own): each configuration's cold start and one warm restart, no racing, no verification: the point is each
    # restart's facts, not a winner.
    timeout --signal=INT --kill-after=30 "${SECONDS_LEFT:-450}" \
        "$PY" -m autotune tune --space search_spaces/h200-dummy.yaml --engine "$ENGINE" --no-mlflow \
            --study mem20-facts --storage "sqlite:///$WORK/optuna.db" --workdir "$WORK" --seed 0 \
            --trials 4 --no-racing --restarts 1 --no-verify \
            --enqueue mode=NONE --enqueue mode=FULL_AND_PIECEWISE,sizes=aligned-64 \
            2>&1 | tr '\r' '\n' | grep -v '^trials:' | tee -a "$OUT/tune-facts.txt"
    echo "tune exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/tune-facts.txt"
    report mem20-facts report-facts
    exit 0
fi

# PART=hog: the floor at MemAvailable - 24 GiB (vLLM's own host memory stays far under that), and a process that
# allocates and touches 40 GiB three seconds after the first restart log appears under the study's logs/, holds it 20 s, and exits.
python3 - "$WORK/h200-hog.yaml" <<'PY'
import sys, yaml
avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable:")) / 2**20
space = yaml.safe_load(open("search_spaces/h200-dummy.yaml"))
space["engine"]["memory_floor_gib"] = round(avail - 24, 1)
space["engine_args"]["model"] = "search_spaces/models/h200-target"
for draft in space["search"]["drafts"].values():
    if str(draft.get("model", "")).startswith("./"):
        draft["model"] = "search_spaces/" + draft["model"][2:]
open(sys.argv[1], "w").write(yaml.safe_dump(space, sort_keys=False))
print(f"MemAvailable {avail:.1f} GiB, floor {space['engine']['memory_floor_gib']} GiB")
PY
python3 - "$WORK/mem20-hog" "$OUT/hog.txt" <<'PY' &
import glob, os, sys, time
import numpy as np
root, out = sys.argv[1], sys.argv[2]
t0 = time.time()
def say(msg):
    with open(out, "a") as f:
        f.write(f"{time.time() - t0:7.1f} s  {msg}\n")
say("hog waiting for the first engine log under " + root)
while not glob.glob(os.path.join(root, "logs", "**", "*.log"), recursive=True):
    if time.time() - t0 > 400:
        say("no engine log in 400 s; giving up"); sys.exit(1)
    time.sleep(0.2)
say("engine log seen: " + ", ".join(glob.glob(os.path.join(root, "logs", "**", "*.log"), recursive=True)))
time.sleep(3)
say("allocating 40 GiB")
hog = np.ones(40 * 2**30 // 8)  # np.ones writes every page
avail = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemAvailable:")) / 2**20
say(f"holding 40 GiB; MemAvailable now {avail:.1f} GiB")
time.sleep(20)
del hog
say("released")
PY
HOG=$!
timeout --signal=INT --kill-after=30 "${SECONDS_LEFT:-450}" \
    "$PY" -m autotune tune --space "$WORK/h200-hog.yaml" --engine "$ENGINE" --no-mlflow \
        --study mem20-hog --storage "sqlite:///$WORK/optuna.db" --workdir "$WORK" --seed 0 \
        --trials 1 --no-racing --restarts 1 --no-verify \
        2>&1 | tr '\r' '\n' | grep -v '^trials:' | tee -a "$OUT/tune-hog.txt"
echo "tune exit status: ${PIPESTATUS[0]}" | tee -a "$OUT/tune-hog.txt"
kill "$HOG" 2>/dev/null; wait "$HOG" 2>/dev/null
cat "$OUT/hog.txt"
report mem20-hog report-hog
