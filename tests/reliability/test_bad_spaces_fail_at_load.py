"""Space files: duplicate keys, unbounded generated sizes and spaces with nothing feasible fail at load time."""

from __future__ import annotations

import io
import textwrap
import time

import pytest

from autotune.cli._main import raw_main
from autotune.config.space import MAX_CAPTURE_SIZE, SpaceError, load_space
from autotune.core.exit_status import ExitStatus

HEAD = """\
name: t
engine_args: {model: org/m}
workload: {concurrency: 4}
"""


def _write(tmp_path, body: str):
    path = tmp_path / "space.yaml"
    path.write_text(HEAD + textwrap.dedent(body))
    return path


def test_a_duplicate_search_block_is_rejected_not_silently_dropped(tmp_path):
    path = _write(tmp_path, """\
        search:
          cudagraph_mode: [PIECEWISE]
        search:
          cudagraph_mode: [FULL]
        """)
    with pytest.raises(SpaceError, match=r"line 6: duplicate key 'search' \(first at line 4"):
        load_space(path)


def test_a_duplicate_nested_key_is_rejected(tmp_path):
    path = _write(tmp_path, """\
        search:
          capture_sizes:
            tiny: [1, 2]
            tiny: [4, 8]
        """)
    with pytest.raises(SpaceError, match="duplicate key 'tiny'"):
        load_space(path)


def test_a_huge_generated_pattern_is_bounded_at_load_time(tmp_path):
    path = _write(tmp_path, """\
        search:
          cudagraph_mode: [PIECEWISE]
          capture_sizes:
            huge: {pattern: step8, max: 1000000000}
        """)
    started = time.monotonic()
    with pytest.raises(SpaceError, match=rf"capture_sizes.huge.max: capture size 1000000000 is above {MAX_CAPTURE_SIZE}"):
        load_space(path)
    assert time.monotonic() - started < 5  # a one-line error, not a MemoryError after minutes


def test_a_huge_fixed_size_is_bounded(tmp_path):
    path = _write(tmp_path, """\
        search:
          capture_sizes:
            big: [1, 99999999]
        """)
    with pytest.raises(SpaceError, match=r"capture_sizes.big\[1\]"):
        load_space(path)


def test_the_largest_allowed_pattern_loads(tmp_path):
    path = _write(tmp_path, f"""\
        search:
          cudagraph_mode: [PIECEWISE]
          capture_sizes:
            most: {{pattern: step8, max: {MAX_CAPTURE_SIZE}}}
        """)
    space = load_space(path)
    sizes = space.config_from_params({"cudagraph_mode": "PIECEWISE", "capture_sizes": "most"}).capture_sizes
    assert sizes[-1] == MAX_CAPTURE_SIZE


def test_a_space_with_no_feasible_configuration_is_reported_at_load_time(tmp_path):
    path = _write(tmp_path, """\
        search:
          num_speculative_tokens: {low: 4, high: 6}
          drafts:
            small: {method: draft_model, model: org/d, max_k: 2}
        """)
    with pytest.raises(SpaceError, match="no configuration is feasible.*max_k"):
        load_space(path)


def test_an_infeasible_space_stops_tune_before_any_engine_start(tmp_path, capsys):
    path = tmp_path / "infeasible.yaml"
    path.write_text("name: t\nengine: {name: sim}\nengine_args: {model: org/m}\nworkload: {concurrency: 4}\n"
                    "search:\n  num_speculative_tokens: {low: 4, high: 6}\n"
                    "  drafts:\n    small: {method: draft_model, model: org/d, max_k: 2}\n")
    status = raw_main(["tune", "--space", str(path), "--storage", f"sqlite:///{tmp_path}/o.db", "--no-mlflow",
                       "--workdir", str(tmp_path / "w")], out=io.StringIO())
    err = capsys.readouterr().err
    assert status == ExitStatus.BAD_INPUT and "no configuration is feasible" in err
    assert "converged" not in err and not (tmp_path / "o.db").exists()


def test_a_partly_infeasible_space_still_loads(tmp_path):
    path = _write(tmp_path, """\
        search:
          num_speculative_tokens: {low: 1, high: 6}
          drafts:
            small: {method: draft_model, model: org/d, max_k: 2}
        """)
    space = load_space(path)
    assert {p["num_speculative_tokens"] for p in space.all_params()} == {1, 2}
