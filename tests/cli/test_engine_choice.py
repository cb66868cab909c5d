"""The engine a command runs and its options, chosen once (``cli._common.EngineChoice``): the space's options with
the command line's over them, every ``${VAR}`` checked before anything is made, the typed items kept for workers."""

from __future__ import annotations

import copy

import pytest
import yaml

from autotune.cli._common import EngineChoice, UsageError
from autotune.config.space import load_space_text
from tests.conftest import SMALL_SPACE


def _space(engine: dict[str, object]):
    raw = copy.deepcopy(SMALL_SPACE)
    raw["engine"] = engine
    return load_space_text(yaml.safe_dump(raw), "spaces/small.yaml")


def test_the_command_line_options_lie_over_the_spaces_and_are_read_once():
    space = _space({"name": "sim", "sim": {"profile": "gb10", "noise": 0.05}})
    choice = EngineChoice.for_space(space, None, ["noise=0.01", "time_scale=0"])
    assert choice.name == "sim"
    assert dict(choice.options) == {"profile": "gb10", "noise": 0.01, "time_scale": 0}
    assert choice.typed == ("noise=0.01", "time_scale=0")  # as typed, for the workers tune --gpus starts
    engine = choice.make(space)
    try:
        assert engine.settings.profile == "gb10" and engine.settings.noise == 0.01
    finally:
        engine.close()


def test_an_unset_reference_is_one_line_before_the_engine_is_made(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_TEST_UNSET_TOKEN", raising=False)
    space = _space({"name": "cmd"})
    with pytest.raises(UsageError, match=r"engine\.cmd\.api_key: \$\{AUTOTUNE_TEST_UNSET_TOKEN\} is not set") as caught:
        EngineChoice.for_space(space, None, ["api_key=${AUTOTUNE_TEST_UNSET_TOKEN}"])
    assert "\n" not in str(caught.value)


def test_a_joining_worker_takes_the_stored_options_with_its_own_over_them():
    space = _space({"name": "sim"})
    choice = EngineChoice.joining(space, "sim", {"profile": "gb10", "noise": 0.05}, {"noise": 0.02}, ["noise=0.02"])
    assert (choice.name, dict(choice.options), choice.typed) == ("sim", {"profile": "gb10", "noise": 0.02},
                                                                   ("noise=0.02",))
