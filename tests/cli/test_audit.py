"""``autotune audit`` and the fixed ``Resolved.details`` names every engine reports under."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from autotune.records import decode
from autotune.cli._main import raw_main
from autotune.core.records import Detail, Resolved

REPO = Path(__file__).resolve().parents[2]


def test_audit_on_the_simulator_shows_the_resolved_speculative_method(tmp_path: Path) -> None:
    out = io.StringIO()
    code = raw_main(["audit", "--space", str(REPO / "search_spaces" / "gb10.yaml"), "--engine", "sim",
                     "--params", "num_speculative_tokens=3", "--params", "draft=ngram",
                     "--workdir", str(tmp_path)], out)
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.getvalue().splitlines() if line.startswith("  ")}
    assert rows["speculative_method"] == ["ngram", "ngram"]
    assert rows["num_speculative_tokens"] == ["3", "3"]


def test_the_vllm_runner_reports_details_under_the_fixed_names() -> None:
    # The runner runs in vLLM's interpreter without autotune, so it spells the names itself.
    vllm_dir = REPO / "autotune" / "engines" / "vllm"
    trees = [ast.parse((vllm_dir / name).read_text()) for name in ("_runner.py", "_facts.py")]
    keys = {node.slice.value for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "details"
            and isinstance(node.slice, ast.Constant)}
    fixed = {v for k, v in vars(Detail).items() if k.isupper() and isinstance(v, str)}
    assert keys and keys <= fixed, keys - fixed


def test_details_stored_under_an_old_name_read_under_the_fixed_one() -> None:
    resolved = decode(Resolved, {"details": {"spec_method": "ngram", "model_runner": "v1"}})
    assert resolved is not None
    assert resolved.details == {Detail.SPEC_METHOD: "ngram", Detail.MODEL_RUNNER: "v1"}
