"""Validation of what users write: errors stay one informative line (golden messages), every number is checked.

The golden messages (``tests/data/golden_errors/errors.json``) were taken from the hand-written validators before
the move to pydantic; see :mod:`tests.golden_errors`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import golden_errors
from tests.golden_errors import CASES, GOLDEN, REWORDED, SOURCE

_GOLDEN = json.loads(GOLDEN.read_text())


def test_every_case_has_a_golden_message():
    assert sorted(_GOLDEN) == sorted(case[0] for case in CASES)
    assert all(_GOLDEN.values()), "a golden case was accepted when it was recorded"


@pytest.mark.parametrize(("case_id", "kind", "value", "field", "fix_word"), CASES, ids=[c[0] for c in CASES])
def test_errors_stay_one_line_naming_the_file_the_field_and_the_fix(tmp_path: Path, case_id, kind, value, field,
                                                                     fix_word):
    message = golden_errors.message(kind, value, tmp_path)
    assert message, f"{case_id}: the bad input was accepted"
    assert "\n" not in message
    assert field in message and fix_word in message, message
    if kind != "result":
        assert message.startswith(f"{SOURCE}: {field}: ") and "; fix: " in message, message
    if case_id not in REWORDED:
        assert message == _GOLDEN[case_id]
