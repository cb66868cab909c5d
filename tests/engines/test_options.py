"""Engine options (issue 32): each engine's ``engine:`` section is one strict pydantic model, validated once when the
engine is made and kept as ``engine.settings``; every number is finite and bounded, a bool is not a number, and a
bad value or an unknown key is one line naming ``engine.<engine>.<field>``."""

from __future__ import annotations

import math
import sys
import typing
from pathlib import Path

import pytest

from autotune.cli.doctor import gather
from autotune.config._models import ENGINE_NAMES
from autotune.config.space import SpaceError, load_space, parse_space
from autotune.engines import ENGINES, EngineError, engine_settings, make_engine
from tests.conftest import SMALL_SPACE

REPO = Path(__file__).resolve().parents[2]
SPACES = sorted((REPO / "search_spaces").glob("*.yaml"))
#: What an engine needs besides the option under test.
REQUIRED = {"cmd": {"command": [sys.executable, "-c", "pass"]}}
BAD_NUMBERS = [math.inf, -math.inf, math.nan, 1e300, -1, True, False, "7"]


def _numeric_fields(name: str) -> list[str]:
    """The options of engine ``name`` that hold a number (found from the model, so a new one is covered)."""
    model = type(engine_settings(name, REQUIRED.get(name, {})))
    out = []
    for field, info in model.model_fields.items():
        kinds = set()
        stack = [info.annotation]
        while stack:
            item = stack.pop()
            args = typing.get_args(item)
            stack.extend(args) if args else kinds.add(item)
        if kinds & {int, float} and bool not in kinds:
            out.append(field)
    return out


CASES = [(name, field) for name in sorted(ENGINES) for field in _numeric_fields(name)]


def test_every_engine_has_its_waits_and_floor_among_the_numbers():
    fields = {name: set(_numeric_fields(name)) for name in ENGINES}
    assert {"startup_timeout_s", "measure_timeout_s", "settle_timeout_s", "memory_floor_gib"} <= fields["vllm"]
    assert {"timeout_s", "kill_grace_s", "settle_timeout_s", "memory_floor_gib"} <= fields["cmd"]
    assert {"noise", "time_scale", "landscape_seed", "landscape_shift", "memory_floor_gib"} <= fields["sim"]


@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
@pytest.mark.parametrize(("engine", "field"), CASES)
def test_a_bad_number_is_one_line_naming_the_engines_field(engine, field, value):
    with pytest.raises(EngineError) as info:
        make_engine(engine, **{**REQUIRED.get(engine, {}), field: value})
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(f"{engine} engine: engine.{engine}.{field} must be "), message
    assert f"got {value!r}" in message, message


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_unknown_key_is_one_line_listing_the_valid_keys(engine):
    with pytest.raises(EngineError) as info:
        make_engine(engine, **REQUIRED.get(engine, {}), startup_timout_s=60)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{engine} engine: unknown option engine.{engine}.startup_timout_s; valid keys: ")
    assert f"engine.{engine}.memory_floor_gib" in message


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_engine_keeps_its_validated_settings_and_doctor_reads_the_same_model(engine):
    made = make_engine(engine, **REQUIRED.get(engine, {}), memory_floor_gib=0)
    try:
        assert made.settings == engine_settings(engine, {**REQUIRED.get(engine, {}), "memory_floor_gib": 0})
        assert made.settings.memory_floor_gib == 0.0
    finally:
        made.close()


def test_the_largest_sane_wait_is_taken_and_one_more_second_is_not():
    engine = make_engine("vllm", startup_timeout_s=86_400, measure_timeout_s=0.5)
    assert (engine.settings.startup_timeout_s, engine.settings.measure_timeout_s) == (86_400.0, 0.5)
    with pytest.raises(EngineError, match=r"engine\.vllm\.startup_timeout_s must be a number of seconds over 0"):
        make_engine("vllm", startup_timeout_s=86_401)


@pytest.mark.parametrize("path", SPACES, ids=lambda p: p.name)
def test_every_engine_section_of_the_repos_spaces_makes_its_engine(path, monkeypatch):
    monkeypatch.chdir(REPO)
    space = load_space(path)
    assert space.engine.sections(), "every space names its engine's options"
    for name, options in space.engine.sections().items():
        engine = make_engine(name, **options)
        try:
            assert engine.settings == engine_settings(name, options)
        finally:
            engine.close()


def test_the_space_names_the_engines_there_are():
    assert set(ENGINE_NAMES) == set(ENGINES)


def test_the_engine_section_is_typed_on_the_space():
    space = parse_space({**SMALL_SPACE, "engine": {"name": "cmd", "command": ["run", "it"], "sim": {"noise": 0.0}}})
    assert space.engine.default == "cmd" and space.engine.name == "cmd"
    assert space.engine.options("cmd") == {"command": ["run", "it"]}  # flat keys: the space's own engine's
    assert space.engine.options("sim") == {"noise": 0.0}
    assert space.engine.sections() == {"sim": {"noise": 0.0}, "cmd": {"command": ["run", "it"]}}
    assert parse_space({**SMALL_SPACE, "engine": None}).engine.default == "vllm"


@pytest.mark.parametrize(("engine", "field"), [({"name": "tensorrt"}, "engine.name"), ({"vllm": [1]}, "engine.vllm")])
def test_a_bad_engine_section_is_one_line_at_load(engine, field):
    with pytest.raises(SpaceError) as info:
        parse_space({**SMALL_SPACE, "engine": engine}, source="bad.yaml")
    assert str(info.value).startswith(f"bad.yaml: {field}: ") and "\n" not in str(info.value)


def test_doctor_reads_the_engines_own_settings(monkeypatch):
    monkeypatch.chdir(REPO)
    facts = gather(load_space(REPO / "search_spaces" / "demo-levels.yaml"))
    assert facts.engine == "sim" and facts.settings == engine_settings("sim", {"profile": "h200",
                                                                               "model_profile": "dense"})


def test_vllm_env_reaches_the_process_as_text():
    # YAML's numbers and true are text in a process environment ("true", as a shell spells it): what
    # VllmOptions.environment() hands the JIT cache rules and the notice of caches left to the user.
    settings = engine_settings("vllm", {"env": {"TOKENS": 3, "FLAG": True, "NAME": "x"}})
    assert settings.environment() == {"TOKENS": "3", "FLAG": "true", "NAME": "x"}
