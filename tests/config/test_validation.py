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


# -- every number is checked where it enters (issue 22, round three) -----------------------------------------


import io  # noqa: E402

import yaml  # noqa: E402

from autotune.cli._main import raw_main  # noqa: E402
from autotune.config.space import SpaceError, load_space  # noqa: E402
from autotune.core.exit_status import ExitStatus  # noqa: E402
from autotune.store import ledger as _ledger  # noqa: E402
from tests._helpers.cli import tune_status  # noqa: E402

#: A small simulated study with a searched engine argument (choices) and a searched range.
SIM_SPACE = {
    "name": "r3",
    "engine": {"name": "sim", "sim": {"profile": "h200", "model_profile": "dense"}},
    "engine_args": {"model": "sim/dense-1b", "max_model_len": 4096},
    "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
    "search": {
        "cudagraph_mode": ["NONE", "FULL_AND_PIECEWISE"],
        "engine_args": {"max_num_seqs": [4, 8, 16], "max_num_batched_tokens": {"low": 512, "high": 1024}},
    },
}


def _write(tmp_path: Path, raw: dict, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _edited(**sections) -> dict:
    raw = json.loads(json.dumps(SIM_SPACE))
    for dotted, value in sections.items():
        node = raw
        *path, last = dotted.split("__")
        for key in path:
            node = node[key]
        node[last] = value
    return raw


def _load_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and "; fix: " in message, message
    return message


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _nothing_ran(tmp_path: Path) -> bool:
    try:
        return not _ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").study.trials
    except Exception:  # noqa: BLE001 - no study at all: nothing ran either
        return True


_LEVELS = "  concurrency: [1, 8]\n  aggregate: mean\n"
_BASE_YAML = ("engine_args: {model: sim/dense-1b, max_model_len: 4096}\nsearch: {cudagraph_mode: [NONE]}\n"
              "workload:\n  num_prompts: 4\n  input_len: 16\n  output_len: 16\n")


@pytest.mark.parametrize("weight", [".nan", ".inf", "-.inf"])
def test_slo07_exp04_non_finite_load_level_weights_are_refused_at_load(tmp_path, weight):
    message = _load_error(tmp_path, _BASE_YAML + _LEVELS + f"  weights: [1, {weight}]\n")
    assert "workload.weights: must be a finite number" in message and "positive numbers" in message


def test_slo03_a_nan_slo_limit_is_refused_at_load_before_any_start(tmp_path, capsys):
    message = _load_error(tmp_path, _BASE_YAML + "  concurrency: 2\nslo: {tpot_p99_ms: .nan}\n")
    assert "slo.tpot_p99_ms: must be a finite number, got nan" in message and "milliseconds" in message
    raw = _edited(slo={"tpot_p99_ms": float("nan")})
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, raw))
    assert status == ExitStatus.BAD_INPUT and "slo.tpot_p99_ms" in _one_line(err)
    assert _nothing_ran(tmp_path)
    # Fixing the limit then starts the study: nothing was recorded under the bad setup.
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, _edited(slo={"tpot_p99_ms": 50})))
    assert status == ExitStatus.SUCCESS, err


@pytest.mark.parametrize("bound", ["high: .inf", "high: .nan"])
def test_ea06_a_range_with_an_infinite_bound_is_refused_at_load(tmp_path, bound):
    text = _BASE_YAML.replace("search: {cudagraph_mode: [NONE]}", "search:\n  cudagraph_mode: [NONE]\n  engine_args:\n"
                              f"    max_num_batched_tokens: {{low: 512, {bound}}}\n") + "  concurrency: 2\n"
    message = _load_error(tmp_path, text)
    assert "search.engine_args.max_num_batched_tokens.high: must be a finite number" in message


@pytest.mark.parametrize(("section", "value", "field"), [
    ("search__engine_args", {"max_num_seqs": [4, float("nan")]}, "search.engine_args.max_num_seqs[1]"),
    ("engine_args", {"model": "sim/dense-1b", "gpu_memory_utilization": float("inf")},
     "engine_args.gpu_memory_utilization"),
    ("workload__temperature", float("nan"), "workload.temperature"),
])
def test_no_nan_or_infinity_enters_anywhere_in_a_space(tmp_path, section, value, field):
    """The same rule as SLO07/SLO03/EA06 for every other number a space holds, free-form sections included."""
    with pytest.raises(SpaceError) as info:
        load_space(_write(tmp_path, _edited(**{section: value})))
    assert f"{field}: must be a finite number" in str(info.value)


def test_no_nan_in_a_draft_option(tmp_path):
    raw = _edited(search__num_speculative_tokens={"low": 0, "high": 2},
                  search__drafts={"d": {"method": "ngram", "synthetic_acceptance_rates": [0.5, float("inf")]}})
    with pytest.raises(SpaceError, match=r"search.drafts.d.synthetic_acceptance_rates\[1\]: must be a finite number"):
        load_space(_write(tmp_path, raw))


def test_ea03_one_argument_searched_under_two_spellings_is_one_line_naming_both(tmp_path):
    raw = _edited(search__engine_args={"max_num_seqs": [4, 8], "max-num-seqs": [16, 32]})
    with pytest.raises(SpaceError) as info:
        load_space(_write(tmp_path, raw))
    message = str(info.value)
    assert "search.engine_args.max-num-seqs:" in message and "max_num_seqs" in message and "keep one" in message
    fixed = _edited(engine_args={"model": "sim/dense-1b", "max_num_seqs": 4, "max-num-seqs": 8})
    with pytest.raises(SpaceError, match=r"engine_args.max-num-seqs: names the same engine argument as max_num_seqs"):
        load_space(_write(tmp_path, fixed))


@pytest.mark.parametrize(("row", "words"), [
    ('{"prompt": "hi", "output_len": 0}', "'output_len' must be a whole number >= 1, got 0"),          # DS10
    ('{"prompt": null}', "'prompt' must be a non-empty text, got null"),                               # DS11
    ('{"prompt": "hi", "output_len": "lots"}', "'output_len' must be a whole number >= 1, got \"lots\""),  # DS12
    ('{"prompt": "hi", "output_len": true}', "'output_len' must be a whole number >= 1, got true"),
    ('{"messages": [{"role": "user"}]}', "'messages' must be a non-empty list"),
    ('{"prompt": "hi", "output_len": 100000}', "leaves no room for the prompt within engine_args.max_model_len=4096"),  # DS14
    ('{"text": "hi"}', "needs a 'prompt' text or a 'messages' list"),
    ('{"prompt": "unterminated', "not JSON"),
])
def test_ds10_ds11_ds12_ds14_a_bad_dataset_row_is_refused_at_load_with_file_and_line(tmp_path, row, words):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "fine"}\n\n' + row + "\n")
    with pytest.raises(SpaceError) as info:
        load_space(_write(tmp_path, _edited(workload__dataset=str(data))))
    message = str(info.value)
    assert f"workload.dataset: {data}:3: " in message and words in message and "; fix: " in message, message
    assert "\n" not in message


def test_ds14_a_workload_output_len_beyond_max_model_len_is_refused(tmp_path):
    with pytest.raises(SpaceError, match=r"workload.output_len: 8192 tokens leave no room .*max_model_len=4096"):
        load_space(_write(tmp_path, _edited(workload__output_len=8192)))


def test_ds17_a_malformed_dataset_is_read_and_refused_with_the_sim_engine(tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "fine"}\nnot json at all\n')
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, _edited(workload__dataset=str(data))))
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT and f"{data}:2: not JSON" in line
    assert _nothing_ran(tmp_path)
    share = tmp_path / "sg.json"
    share.write_text('{"conversations": "not a list"}')
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, _edited(workload__dataset=str(share))))
    assert status == ExitStatus.BAD_INPUT and "a ShareGPT file is a JSON list" in _one_line(err)


@pytest.mark.parametrize(("item", "words"), [
    ("max_num_seqs=999", "max_num_seqs 999 is not in the space; use one of 4, 8, 16"),                   # EA08
    ("max_num_batched_tokens=99999", "max_num_batched_tokens 99999 is outside the space; use a whole number "
                                     "from 512 to 1024"),                                                # EA09
    ("max_num_batched_tokens=600.5", "use a whole number from 512 to 1024"),
])
def test_ea08_ea09_enqueue_outside_the_space_is_refused_before_anything_starts(tmp_path, capsys, item, words):
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, SIM_SPACE), "--enqueue", item)
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT and words in line and "--enqueue" in line
    assert _nothing_ran(tmp_path)
    # The study was never created: the same command without --enqueue starts it.
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, SIM_SPACE))
    assert status == ExitStatus.SUCCESS, err


def test_enqueue_inside_the_space_is_accepted(tmp_path, capsys):
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, SIM_SPACE), "--enqueue",
                        "max_num_seqs=16,max_num_batched_tokens=700")
    assert status == ExitStatus.SUCCESS, err


@pytest.mark.parametrize("search_engine_args", [
    {"max_num_seqs": [4, 8, 16], "max_num_batched_tokens": {"low": 8192, "high": 16384}},   # EA10: a range moved
    {"max_num_seqs": [32, 64], "max_num_batched_tokens": {"low": 512, "high": 1024}},       # EA11: other choices
])
def test_ea10_ea11_a_resume_after_the_searched_engine_args_changed_is_refused_naming_them(tmp_path, capsys,
                                                                                          search_engine_args):
    assert tune_status(tmp_path, capsys, _write(tmp_path, SIM_SPACE))[0] == ExitStatus.SUCCESS
    before = len(_ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").study.trials)
    status, err = tune_status(tmp_path, capsys, _write(tmp_path, _edited(search__engine_args=search_engine_args)), trials=4)
    line = _one_line(err)
    assert status == ExitStatus.BAD_INPUT and "space sections changed: search.engine_args" in line
    assert "--study NEW-NAME" in line
    assert len(_ledger.load("one", f"sqlite:///{tmp_path}/optuna.db").study.trials) == before


def test_ds16_a_resume_after_the_dataset_content_changed_is_refused(tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "first"}\n{"prompt": "second"}\n')
    space = _write(tmp_path, _edited(workload__dataset=str(data)))
    assert tune_status(tmp_path, capsys, space)[0] == ExitStatus.SUCCESS
    status, err = tune_status(tmp_path, capsys, space, trials=3)
    assert status == ExitStatus.SUCCESS, err  # the same prompts resume
    data.write_text('{"prompt": "something else entirely"}\n{"prompt": "second"}\n')
    status, err = tune_status(tmp_path, capsys, space, trials=4)
    assert status == ExitStatus.BAD_INPUT and "space sections changed: workload.prompts" in _one_line(err)


def test_a_study_stored_before_the_new_digests_still_resumes(tmp_path, capsys):
    """A fingerprint recorded without ``search.engine_args`` and ``workload.prompts`` is not a difference."""
    from autotune.store.fingerprint import ADDED_DIGESTS, Fingerprint, fingerprint

    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "first"}\n')
    space = load_space(_write(tmp_path, _edited(workload__dataset=str(data))))
    now = fingerprint(space, {"name": "sim"})
    assert set(ADDED_DIGESTS) <= set(now.space)
    old = Fingerprint(now.model, now.engine, {k: v for k, v in now.space.items() if k not in ADDED_DIGESTS})
    assert old.differences(now) == []
    changed = Fingerprint(now.model, now.engine, {**now.space, "workload.prompts": "0" * 16})
    assert changed.differences(now) == ["space sections changed: workload.prompts"]


# -- autotune schema --------------------------------------------------------------------------------------------


def _schema_via_cli() -> dict:
    out = io.StringIO()
    assert raw_main(["schema"], out=out) == ExitStatus.SUCCESS
    return json.loads(out.getvalue())


def _check_against(schema: dict, node: dict, value, where: str = "") -> None:
    """A small JSON Schema check (objects, closed keys, required, enums, types) for the test, as the jsonschema
    package is not installed; enough to show the printed schema accepts a file or refuses an unknown key."""
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    if "anyOf" in node:
        failures = []
        for option in node["anyOf"]:
            try:
                _check_against(schema, option, value, where)
                return
            except AssertionError as exc:
                failures.append(str(exc))
        raise AssertionError(f"{where}: matches no option ({'; '.join(failures)})")
    kind = node.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if kind in types:
        assert isinstance(value, types[kind]), f"{where}: not {kind}"
    if kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: not an integer"
    if kind == "number":
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: not a number"
    if "enum" in node:
        assert value in node["enum"], f"{where}: {value!r} not in {node['enum']}"
    if "minimum" in node:
        assert value >= node["minimum"], f"{where}: below minimum"
    if kind == "object":
        props = node.get("properties", {})
        for key in node.get("required", []):
            assert key in value, f"{where}.{key}: required"
        for key, item in value.items():
            if key in props:
                _check_against(schema, props[key], item, f"{where}.{key}")
            elif node.get("additionalProperties") is False:
                raise AssertionError(f"{where}.{key}: unknown key")
            elif isinstance(node.get("additionalProperties"), dict):
                _check_against(schema, node["additionalProperties"], item, f"{where}.{key}")
    if kind == "array" and "items" in node:
        for i, item in enumerate(value):
            _check_against(schema, node["items"], item, f"{where}[{i}]")


@pytest.mark.parametrize("path", sorted(Path("search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_the_printed_schema_accepts_every_shipped_space(path):
    from autotune.config._models import SpaceFile

    schema = _schema_via_cli()
    raw = yaml.safe_load(path.read_text())
    _check_against(schema, schema, raw)
    SpaceFile.model_validate(raw)  # the model the schema comes from, round trip
    load_space(path)


def test_the_printed_schema_refuses_an_unknown_key_where_the_loader_does(tmp_path):
    schema = _schema_via_cli()
    raw = yaml.safe_load(Path("search_spaces/demo-slo.yaml").read_text())
    raw["search"]["capture_size"] = {"tiny": [1, 2]}  # a typo of capture_sizes
    with pytest.raises(AssertionError, match=r"\.search\.capture_size: unknown key"):
        _check_against(schema, schema, raw)
    with pytest.raises(SpaceError, match=r"search.capture_size: unknown key; fix: use one of: cudagraph_mode, "):
        load_space(_write(tmp_path, raw))
    raw = yaml.safe_load(Path("search_spaces/demo-slo.yaml").read_text())
    raw["workload"]["concurrency"] = "lots"
    with pytest.raises(AssertionError, match=r"\.workload\.concurrency: matches no option"):
        _check_against(schema, schema, raw)


# -- a study stored by the code before this change resumes ------------------------------------------------------


def test_a_study_database_created_before_the_pydantic_loader_resumes(tmp_path, capsys):
    """``tests/data/study_118f11c/optuna.db``: 3 trials of its ``space.yaml``, created by autotune at 118f11c
    (no ``search.engine_args`` or ``workload.prompts`` digest in its fingerprint, stored dict shapes of then)."""
    import shutil

    from autotune.store.fingerprint import ADDED_DIGESTS

    fixture = Path(__file__).resolve().parents[1] / "data" / "study_118f11c"
    shutil.copy(fixture / "optuna.db", tmp_path / "optuna.db")
    space = tmp_path / "space.yaml"
    shutil.copy(fixture / "space.yaml", space)
    stored = _ledger.load("old", f"sqlite:///{tmp_path}/optuna.db")
    assert not set(ADDED_DIGESTS) & set(stored.fingerprint().space), "the fixture predates the new digests"
    assert stored.finished_search_trials() == 3
    argv = ["tune", "--space", str(space), "--engine", "sim", "--trials", "5", "--no-verify", "--no-mlflow", "--quiet",
            "--storage", f"sqlite:///{tmp_path}/optuna.db", "--workdir", str(tmp_path / "w"), "--study", "old"]
    status = raw_main(argv, out=io.StringIO())
    assert status == ExitStatus.SUCCESS, capsys.readouterr().err
    resumed = _ledger.load("old", f"sqlite:///{tmp_path}/optuna.db")
    assert resumed.finished_search_trials() == 5
    assert resumed.fingerprint() == stored.fingerprint(), "an old study keeps the fingerprint it was started with"
