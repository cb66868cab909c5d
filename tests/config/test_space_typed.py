"""The space file is read once into the typed :class:`SpaceFile` and built from it (issue 32, principle 1): each
default of the workload is written once (the model's field, which is the record's), and the rules between a
draft's, a search's or a workload's keys live on their models, with the one-line errors they always gave."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.config._models import Draft, SearchSpec, SpaceFile, WorkloadSpec
from autotune.config.space import SpaceError, parse_space
from autotune.core.records import Workload

MINIMAL: dict[str, Any] = {"engine_args": {"model": "org/model"}, "workload": {}, "search": {}}
#: The fields whose default is a value (the rest default to unset: no dataset, no aggregate, no weights).
VALUED = [name for name, f in WorkloadSpec.model_fields.items() if f.default is not None]


def _space(**changes: Any) -> Any:
    raw = copy.deepcopy(MINIMAL)
    for dotted, value in changes.items():
        node = raw
        *path, last = dotted.split("__")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return parse_space(raw, source="s.yaml", base_dir=Path.cwd())


def _error(**changes: Any) -> str:
    with pytest.raises(SpaceError) as info:
        _space(**changes)
    message = str(info.value)
    assert "\n" not in message and message.startswith("s.yaml: ") and "; fix: " in message, message
    return message


def _other(default: Any) -> Any:
    """A valid value unlike ``default`` (a workload field's)."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    return default / 2 + 0.25


@contextlib.contextmanager
def _default(field: str, value: Any) -> Iterator[None]:
    """``WorkloadSpec``'s default for ``field`` set to ``value`` while inside (the models rebuilt around it)."""
    info = WorkloadSpec.model_fields[field]
    old = info.default
    try:
        info.default = value
        WorkloadSpec.model_rebuild(force=True)
        SpaceFile.model_rebuild(force=True)
        yield
    finally:
        info.default = old
        WorkloadSpec.model_rebuild(force=True)
        SpaceFile.model_rebuild(force=True)


def test_the_workload_model_gives_every_default():
    assert set(VALUED) >= {"num_prompts", "input_len", "output_len", "concurrency", "seed", "warmup_passes",
                           "max_warmup_passes", "timed_passes", "pass_seconds", "repetitive_prompts",
                           "temperature", "top_p"}
    # An empty workload is the record's default workload: the model's defaults are the record's.
    assert _space().workload == Workload()
    for name in VALUED:
        assert WorkloadSpec.model_fields[name].default == getattr(Workload(), name), name


@pytest.mark.parametrize("field", VALUED)
def test_a_workload_default_is_written_once(field):
    """The loader takes a left-out key's value from the model's field: change the field's default and the loaded
    workload follows. A second copy of the default in the loader (or the record's own, read past the model) would
    keep the old value and fail here."""
    value = _other(WorkloadSpec.model_fields[field].default)
    with _default(field, value):
        assert getattr(_space().workload, field) == value
    assert getattr(_space().workload, field) == WorkloadSpec.model_fields[field].default


def test_a_draft_fragment_is_what_was_written():
    """No vLLM default (``prompt_lookup_min: 1``) is filled in; ``max_k`` is autotune's and stays out."""
    space = _space(search__num_speculative_tokens={"low": 0, "high": 2},
                   search__drafts={"n": {"method": "ngram", "max_k": 2, "prompt_lookup_max": 3}})
    (draft,) = space.drafts
    assert dict(draft.fragment) == {"method": "ngram", "prompt_lookup_max": 3} and draft.max_k == 2


# -- the rules live on the models ---------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "data"), [
    (Draft, {"method": "eagle"}),
    (Draft, {"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}),
    (Draft, {"method": "ngram", "max_k": 17}),
    (Draft, {"method": "ngram", "num_speculative_tokens": 3}),
    (SearchSpec, {"cudagraph_mode": ["FULLEST"]}),
    (SearchSpec, {"cudagraph_mode": []}),
    (SearchSpec, {"capture_sizes": {"default": [1, 2]}}),
    (SearchSpec, {"capture_sizes": {"mine": None}}),
    (WorkloadSpec, {"concurrency": [1, 1], "aggregate": "min"}),
    (WorkloadSpec, {"concurrency": [1, 8]}),
    (WorkloadSpec, {"warmup_passes": 3, "max_warmup_passes": 2}),
])
def test_the_model_alone_refuses_a_broken_rule(model, data):
    with pytest.raises(ValidationError):
        model.model_validate(data)


@pytest.mark.parametrize(("changes", "expected"), [
    ({"search__drafts": {"d": {"method": "eagle3"}}},
     "search.drafts.d.model: method eagle3 needs a draft model; fix: add model: PATH-OR-HUB-ID"),
    ({"search__drafts": {"d": {"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}}},
     "search.drafts.d.prompt_lookup_max: is below prompt_lookup_min; fix: make prompt_lookup_max >= "
     "prompt_lookup_min"),
    ({"search__drafts": {"d": {"method": "ngram", "prompt_lookup_min": 0}}},
     "search.drafts.d.prompt_lookup_min: must be >= 1, got 0; fix: use a value >= 1"),
    ({"search__drafts": {"d": {"method": "ngram", "prompt_lookup_max": True}}},
     "search.drafts.d.prompt_lookup_max: must be an integer, got True; fix: write a whole number >= 1"),
    ({"search__drafts": {"d": {"method": "ngram", "max_k": 40}}},
     "search.drafts.d.max_k: 40 is out of range; fix: use at most 16"),
    ({"search__drafts": {"d": {"method": "ngram", "num_speculative_tokens": 3}}},
     "search.drafts.d.num_speculative_tokens: is searched, not fixed per draft; fix: remove it and set "
     "search.num_speculative_tokens instead"),
    ({"search__cudagraph_mode": ["FULL", "fullest"]},
     "search.cudagraph_mode[1]: unknown mode 'fullest'; fix: use one of: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, "
     "FULL_AND_PIECEWISE"),
    ({"search__cudagraph_mode": []},
     "search.cudagraph_mode: must be a non-empty list; fix: list some of: NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, "
     "FULL_AND_PIECEWISE"),
    ({"search__capture_sizes": {"default": [1, 2]}},
     "search.capture_sizes.default: 'default' is reserved for the engine's own sizes; fix: give this list another "
     "name"),
    ({"search__capture_sizes": {"mine": None}},
     "search.capture_sizes.mine: must be a list of sizes or {pattern, max}, got None; fix: write e.g. [1, 2, 4, 8] "
     "or {pattern: pow2, max: 64}"),
    ({"workload__concurrency": [1, 8, 1], "workload__aggregate": "min"},
     "workload.concurrency: repeats a load level ([1, 8, 1]); fix: list each level once"),
    ({"workload__concurrency": [], "workload__aggregate": "min"},
     "workload.concurrency: is an empty list; fix: give one number, or load levels such as [1, 8, 32]"),
    ({"workload__concurrency": 4, "workload__weights": [1.0]},
     "workload.weights: applies to several load levels, but concurrency is one number; fix: remove weights, or "
     "give load levels such as concurrency: [1, 8, 32]"),
    ({"workload__concurrency": [1, 8], "workload__aggregate": "mean", "workload__weights": [1.0]},
     "workload.weights: has 1 weights for 2 load levels; fix: give one weight per level, in the order of "
     "concurrency"),
    ({"workload__warmup_passes": 3, "workload__max_warmup_passes": 2},
     "workload.max_warmup_passes: is below warmup_passes; fix: make it >= warmup_passes"),
])
def test_a_moved_rule_gives_its_one_line_error(changes, expected):
    assert _error(**changes) == f"s.yaml: {expected}"


def test_the_choices_are_built_from_the_typed_search():
    space = _space(search__cudagraph_mode=["full", "FULL", "default", "NONE"],
                   search__capture_sizes={"default": None, "tiny": [4, 1, 2], "gen": {"pattern": "pow2", "max": 8}})
    assert space.modes == ("default", "FULL", "NONE")
    assert [(s.name, s.sizes, s.pattern, s.max) for s in space.sizes] == [
        ("default", None, None, None), ("tiny", (4, 1, 2), None, None), ("gen", None, "pow2", 8)]
