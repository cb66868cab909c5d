"""``autotune tune``'s settings, one typed object: each flag's bounds on its field, checked once, one line each."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from autotune.cli._main import build_parser
from autotune.cli._tune_settings import TuneSettings
from autotune.cli.preflight import PreflightError


def _settings(*flags: str, monkeypatch: pytest.MonkeyPatch) -> TuneSettings:
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    return TuneSettings.from_cli_args(build_parser().parse_args(["tune", *flags]))


# (flag, the last value inside, the first outside, words of the line) for each side of each bound.
BOUNDS = [
    ("--top-k", "1", "0", "--top-k must be >= 1, got 0; use --no-verify"),
    ("--top-k", "100", "101", "--top-k must be between 1 and 100"),
    ("--seed", "0", "-1", "--seed must be between 0 and 4294967295, got -1"),
    ("--seed", str(2**32 - 1), str(2**32), "--seed must be between 0 and 4294967295"),
    ("--budget-restarts", "1", "0", "--budget-restarts must be >= 1, got 0"),
    ("--budget-minutes", "525600", "525601", "--budget-minutes must be a positive number of minutes"),
    ("--trials", "100000", "100001", "--trials must be between 1 and 100000, got 100001"),
    ("--max-restarts", "1", "0", "--max-restarts must be >= 1, got 0"),
    ("--verify-restarts", "1", "0", "--verify-restarts must be >= 1, got 0"),
    ("--verify-rounds", "0", "-1", "--verify-rounds must be >= 0 (0: fixed verification), got -1"),
    ("--verify-rounds", "1000", "1001", "--verify-rounds must be between 0 and 1000, got 1001"),
    ("--min-effect", "10", "10.5", "--min-effect must be a speedup above 1 and at most 10"),
    ("--power", "0.5", "0.49", "--power must be at least 0.5 and below 1"),
    ("--verify-margin", "0.5", "1", "--verify-margin must be a fraction between 0 and 1"),
]


@pytest.mark.parametrize(("flag", "inside", "outside", "words"), BOUNDS,
                         ids=[f"{b[0]}={b[2]}" for b in BOUNDS])
def test_a_flag_is_held_to_its_fields_bounds_in_one_line(flag, inside, outside, words, monkeypatch):
    _settings(flag, inside, "--no-racing", monkeypatch=monkeypatch)
    with pytest.raises(PreflightError) as caught:
        _settings(flag, outside, "--no-racing", monkeypatch=monkeypatch)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_budget_of_minutes_that_is_no_number_is_refused(value, monkeypatch):
    with pytest.raises(PreflightError, match="--budget-minutes must be a positive number of minutes"):
        _settings("--budget-minutes", value, monkeypatch=monkeypatch)


def test_with_several_bad_flags_the_first_named_is_the_one_tune_always_checked_first(monkeypatch):
    # Floors of the counts before their ceilings: --trials 0 is named before --restarts 1001.
    with pytest.raises(PreflightError, match=r"^--trials must be >= 1, got 0$"):
        _settings("--restarts", "1001", "--trials", "0", monkeypatch=monkeypatch)
    with pytest.raises(PreflightError, match=r"^--restarts must be between 1 and 1000, got 1001$"):
        _settings("--max-restarts", "1001", "--restarts", "1001", monkeypatch=monkeypatch)


def test_racing_starts_within_its_cap_and_without_racing_the_cap_is_raised(monkeypatch):
    with pytest.raises(PreflightError, match=r"--restarts must be between 1 and --max-restarts \(4\), got 5"):
        _settings("--restarts", "5", "--max-restarts", "4", monkeypatch=monkeypatch)
    fixed = _settings("--restarts", "5", "--max-restarts", "4", "--no-racing", monkeypatch=monkeypatch)
    assert fixed.study_options(study_name="s").policy.max_restarts == 5


def test_the_settings_are_strict_and_frozen(monkeypatch):
    settings = _settings(monkeypatch=monkeypatch)
    with pytest.raises(ValidationError):
        settings.top_k = 2
    with pytest.raises(ValidationError):
        TuneSettings(top_k="2")
    assert math.isclose(TuneSettings(budget_minutes=90.0).study_options(study_name="s").budget_minutes, 90.0)
