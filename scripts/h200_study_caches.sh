#!/usr/bin/env bash
# Carry a study's workdir caches (vLLM's compile cache, Triton's and FlashInfer's JIT caches: autotune keeps all
# three under the workdir, autotune/engines/vllm/_caches.py) from one lent GPU machine to the next, inside the
# device tool's limits: at most 8 files come back from $OUT, 16 MiB each, 64 MiB together, and a call carries at
# most 64 MiB of working tree. A study longer than one session's device time resumes on a fresh machine; without
# its caches every configuration's first start there is cold again (the H200 MoE target: ~200 s for the first).
#
# Usage (repository root, on the device machine):
#   bash scripts/h200_study_caches.sh pack   STUDY_DIR OUT     # STUDY_DIR's caches -> OUT/caches.tgz.00, .01, ...
#   bash scripts/h200_study_caches.sh unpack STUDY_DIR PARTS_DIR   # PARTS_DIR/caches.tgz.* -> STUDY_DIR
# pack leaves out the engine logs and the Optuna database (they travel on their own) and writes parts of 15 MiB;
# it keeps nothing and says so when the parts would pass MAX_PARTS (default 4: 60 MiB, leaving room for the other
# files that come back).
set -euo pipefail
what="${1:-}"; dir="${2:-}"; where="${3:-}"
if [[ -z "$what" || -z "$dir" || -z "$where" ]]; then
    echo "usage: $0 pack STUDY_DIR OUT | unpack STUDY_DIR PARTS_DIR" >&2; exit 2
fi
MAX_PARTS="${MAX_PARTS:-4}"
case "$what" in
    pack)
        mkdir -p "$where"
        tar -C "$dir" --exclude='*.log' --exclude='optuna.db*' -czf - . | split -b 15m -d - "$where/caches.tgz."
        parts=("$where"/caches.tgz.*)
        size=$(cat "${parts[@]}" | wc -c)
        if (( ${#parts[@]} > MAX_PARTS )); then
            rm -f "${parts[@]}"
            echo "h200_study_caches: $size bytes compressed, over $MAX_PARTS parts of 15 MiB: not kept" >&2; exit 1
        fi
        echo "h200_study_caches: packed $(du -sh "$dir" | cut -f1) of $dir into ${#parts[@]} part(s), $size bytes"
        ;;
    unpack)
        mkdir -p "$dir"
        cat "$where"/caches.tgz.* | tar -xz -C "$dir"
        echo "h200_study_caches: unpacked into $dir: $(du -sh "$dir" | cut -f1)"
        ;;
    *) echo "usage: $0 pack STUDY_DIR OUT | unpack STUDY_DIR PARTS_DIR" >&2; exit 2 ;;
esac
