"""On a CUDA GPU with vLLM: the audit catches vLLM 0.26's silent capture-size rounding.

Skipped without CUDA (CI has none). Its real run, on an H200 with vLLM 0.26.0, is recorded with the command
and raw output in docs/measurements/h200-vllm026.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.cli._main import main
from autotune.core.exit_status import ExitStatus


def _cuda_vllm_available() -> bool:
    probe = "import torch, vllm; raise SystemExit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda_vllm_available(), reason="needs CUDA and vLLM")]


def test_audit_reports_capture_sizes_rounded_to_multiples_of_one_plus_k(tmp_path):
    out = tmp_path / "audit.json"
    status = main(["audit", "--space", "search_spaces/h200-dummy.yaml", "--engine", "vllm",
                   "--params", "cudagraph_mode=FULL_AND_PIECEWISE", "--params", "capture_sizes=[1,2,4,8]",
                   "--params", "num_speculative_tokens=3", "--params", "draft=small-draft",
                   "--workdir", str(tmp_path / "work"), "--json", str(out), "--strict"])
    assert status == ExitStatus.CHANGED
    data = json.loads(out.read_text())
    assert data["changed"] == ["capture_sizes"]
    assert data["restart"]["resolved"]["cudagraph_capture_sizes"] == [4, 8]  # as measured on vLLM 0.26.0
