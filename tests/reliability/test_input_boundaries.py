"""Issue 32, round four: every input is checked at its boundary, the same way in every command.

Principles tested here (docs/reliability.md, "Round four (issue 32): input boundaries"):

1. One typed boundary per input, used by every command: the space file (YAML, its keys and types, its engine
   sections), the dataset, the stored attributes; bad input is one line naming the file or field and the fix.
2. Numbers are checked before they are believed: finite and plausible, sizes bounded at load, YAML aliases bounded.
6. The store tells the truth: locked is not corrupt, a wrong stored type is one line naming the key and the trial.
7. Output paths are checked before the work; ``report | head`` is not an error.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import pytest
import yaml

from tests._helpers.cli import SIM_SPACE, one_line, run_cli, space_file, tune_argv
from autotune.records import decode, encode
from autotune.config.space import SpaceError, load_space
from autotune.core.exit_status import ExitStatus

#: Every command that reads a space file, as argv for a space path (``schema`` reads none).
def _commands(tmp_path: Path) -> dict[str, object]:
    return {
        "tune": lambda s: tune_argv(tmp_path, s),
        "doctor": lambda s: ["doctor", "--space", str(s)],
        "audit": lambda s: ["audit", "--space", str(s), "--engine", "sim", "--workdir", str(tmp_path / "a")],
    }


# -- principle 1 and 2: the space file as YAML ------------------------------------------------------------------

#: A "billion laughs" file: ten levels of ten aliases each, under a free-form section (vLLM's own arguments).
_BOMB = ("name: bomb\nworkload: {num_prompts: 8, input_len: 64, output_len: 64, concurrency: 4}\n"
         "search: {cudagraph_mode: [NONE]}\nengine: {name: sim}\nengine_args:\n  model: sim/dense-1b\n"
         "  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
             f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(9)))


def test_a_yaml_alias_bomb_is_refused_at_once_in_every_command(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(_BOMB)
    assert len(_BOMB) < 2048  # a 2 KB file that expands to 10**10 items
    for name, argv in _commands(tmp_path).items():
        started = time.monotonic()
        status, _, err = run_cli(argv(path), capsys)
        assert time.monotonic() - started < 10, name
        line = one_line(err)
        assert status == ExitStatus.BAD_INPUT, (name, line)
        assert str(path) in line and "alias" in line and "fix:" in line, line


def test_a_recursive_yaml_alias_is_one_line(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: &n [*n]\n")
    with pytest.raises(SpaceError, match="alias"):
        load_space(path)


def test_a_few_ordinary_aliases_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(SIM_SPACE, sort_keys=False).replace(
        "search:\n", "search:\n  capture_sizes: {tiny: &s [1, 2, 4, 8], again: *s}\n"))
    assert [s.name for s in load_space(path).sizes] == ["default", "tiny", "again"]


@pytest.mark.parametrize("kind", ["directory", "unreadable", "not-utf8", "missing"])
def test_a_space_that_is_not_a_readable_text_file_is_one_line_in_every_command(tmp_path, capsys, kind):
    path = tmp_path / "space.yaml"
    if kind == "directory":
        path.mkdir()
    elif kind == "unreadable":
        space_file(tmp_path)
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: every file is readable")
    elif kind == "not-utf8":
        path.write_bytes(b"name: caf\xe9\n" + yaml.safe_dump(SIM_SPACE).encode())
    for name, argv in _commands(tmp_path).items():
        status, _, err = run_cli(argv(path), capsys)
        line = one_line(err)
        assert status == ExitStatus.BAD_INPUT, (name, line)
        assert line.startswith(f"autotune: error: {path}: ") and "fix:" in line, (name, line)


# -- principle 1: a boolean is not an integer --------------------------------------------------------------------


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["engine_args"].update(max_num_seqs=True), "engine_args.max_num_seqs"),
    (lambda d: d["engine_args"].update({"max-num-batched-tokens": False}), "engine_args.max_num_batched_tokens"),
    (lambda d: d["search"].update(engine_args={"max_num_seqs": [4, True, 16]}), "search.engine_args.max_num_seqs"),
    (lambda d: d["search"].update(engine_args={"block_size": [16, 32.5]}), "search.engine_args.block_size"),
    (lambda d: d["search"].update(engine_args={"some_new_arg": [1, True]}), "search.engine_args.some_new_arg"),
    (lambda d: d["search"].update(engine_args={"max_num_seqs": {"low": 1.5, "high": 8}}),
     "search.engine_args.max_num_seqs"),
    (lambda d: d["workload"].update(num_prompts=True), "workload.num_prompts"),
    (lambda d: d["workload"].update(concurrency=[1, True]), "workload.concurrency"),
])
def test_a_boolean_or_fraction_where_an_integer_is_expected_is_refused_naming_the_field(tmp_path, edit, field):
    with pytest.raises(SpaceError) as info:
        load_space(space_file(tmp_path, edit))
    message = str(info.value)
    assert "\n" not in message and f": {field}" in message and "; fix: " in message, message


def test_booleans_where_booleans_belong_still_load(tmp_path):
    space = load_space(space_file(tmp_path, lambda d: (d["engine_args"].update(enforce_eager=True),
                                                   d["search"].update(engine_args={"enable_prefix_caching":
                                                                                   [True, False]}))))
    assert space.engine_args["enforce_eager"] is True


# -- principle 2: every number field of the space, given inf, nan and 1e300 --------------------------------------

import math  # noqa: E402
import typing  # noqa: E402

from pydantic import BaseModel  # noqa: E402

from autotune.config import _models  # noqa: E402

#: Where each model of the space lives, with the least a valid instance holds there.
_MODEL_AT: dict[type[BaseModel], tuple[str, dict]] = {
    _models.SpaceFile: ("", {}),
    _models.WorkloadSpec: ("workload", {}),
    _models.SearchSpec: ("search", {}),
    _models.SizePattern: ("search.capture_sizes.gen", {"pattern": "pow2", "max": 8}),
    _models.KRange: ("search.num_speculative_tokens", {}),
    _models.Draft: ("search.drafts.d", {"method": "ngram"}),
    _models.EngineArgRange: ("search.engine_args.some_arg", {"low": 1, "high": 8}),
    _models.OutputCheckSpec: ("output_check", {}),
    _models.DatasetSpec: ("workload.dataset", {"vllm": "random"}),
}
if hasattr(_models, "EngineSection"):  # the engine: section, typed (its options are each engine's model's)
    _MODEL_AT[_models.EngineSection] = ("engine", {})
if hasattr(_models, "EngineArgs"):  # absent before issue 32: the file still runs there, to show what failed before
    _MODEL_AT[_models.EngineArgs] = ("engine_args", {})
#: The free-form sections (what belongs to vLLM or an engine): any number there is checked too.
_FREE_FORM = ["engine_args.some_arg", "search.drafts.d.some_option", "workload.dataset.args.some_option",
              "engine.sim.noise", "engine.vllm.some_option"]
_BAD = [float("inf"), float("nan"), 1e300, 10**300]


def _models_of_space() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    stack: list[typing.Any] = [_models.SpaceFile]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item in seen:
                continue
            seen.append(item)
            stack.extend(f.annotation for f in item.model_fields.values())
        else:
            stack.extend(typing.get_args(item))
    return seen


def _sample(annotation: typing.Any, bad: typing.Any) -> typing.Any:
    """A value of ``annotation``'s shape with ``bad`` where a number goes (``None``: no number in it)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _sample(typing.get_args(annotation)[0], bad)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        members = typing.get_args(annotation)
        if any(m in (int, float) or typing.get_origin(m) is typing.Annotated and typing.get_args(m)[0] in (int, float)
               for m in members):
            return bad
        for m in members:
            sample = _sample(m, bad)
            if sample is not None:
                return sample
        return None
    if annotation in (int, float):
        return bad
    if origin is list:
        inner = _sample(typing.get_args(annotation)[0], bad)
        return None if inner is None else [inner]
    if origin is dict:
        key_type, value_type = typing.get_args(annotation)
        keys = typing.get_args(key_type) if typing.get_origin(key_type) is typing.Literal else ("x",)
        inner = _sample(value_type, bad)
        return None if inner is None else {keys[0]: inner}
    return None


def _number_fields() -> list[tuple[str, dict, typing.Any]]:
    """``(dotted field, model's base, sample)`` for every field of every space model that holds a number."""
    out = []
    for model in _models_of_space():
        assert model in _MODEL_AT, f"{model.__name__}: say where it lives in _MODEL_AT"
        at, base = _MODEL_AT[model]
        for name, field in model.model_fields.items():
            if _sample(field.annotation, 1.5) is not None:
                out.append((f"{at}.{name}".lstrip("."), base, field.annotation))
    return out


def _set(raw: dict, dotted: str, value: typing.Any, bases: dict[str, dict]) -> None:
    parts = dotted.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        prefix = ".".join(parts[:i + 1])
        if not isinstance(node.get(part), dict):
            node[part] = copy.deepcopy(bases.get(prefix, {}))
        node = node[part]
    node[parts[-1]] = value


_BASES = {at: base for at, base in _MODEL_AT.values()}
_CASES = [(field, bad) for field, _, _ in _number_fields() for bad in _BAD] + \
         [(field, bad) for field in _FREE_FORM for bad in _BAD]


@pytest.mark.parametrize(("field", "bad"), _CASES, ids=[f"{f}={b!r:.8}" for f, b in _CASES])
def test_every_number_field_of_the_space_refuses_inf_nan_and_absurd_values(tmp_path, field, bad):
    annotation = next((a for f, _, a in _number_fields() if f == field), None)
    value = bad if annotation is None else _sample(annotation, bad)
    raw = copy.deepcopy(SIM_SPACE)
    raw.setdefault("search", {})
    _set(raw, field, value, _BASES)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    label_only = annotation is not None and str in typing.get_args(annotation)  # name: a label, not a number
    if label_only and isinstance(bad, (int, float)) and math.isfinite(bad):
        return
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    shown = field.replace("-", "_")
    assert "\n" not in message and f"{path}: {shown}" in message and "; fix: " in message, message


def test_the_fuzz_covers_every_model_and_number_field():
    fields = [f for f, _, _ in _number_fields()]
    assert {"workload.num_prompts", "workload.weights", "slo", "engine_args.max_num_seqs",
            "search.engine_args.some_arg.low", "search.capture_sizes.gen.max", "search.drafts.d.max_k"} <= set(fields)


def test_an_unbounded_workload_size_is_refused_at_load(tmp_path):
    for key in ("num_prompts", "input_len", "concurrency"):
        with pytest.raises(SpaceError, match=rf": workload.{key}: must be <= "):
            load_space(space_file(tmp_path, lambda d, k=key: d["workload"].update({k: 10**12})))


# -- principle 2: what the engine says is checked before it is believed ------------------------------------------

import json  # noqa: E402

from autotune.core import facts as F  # noqa: E402
from autotune.core.records import RestartResult  # noqa: E402


@pytest.mark.parametrize(("field", "value"), [
    *[(f"facts.{key}", bad) for key in F.PHASES for bad in (1e300, float("inf"), -1e300)],
    ("startup_s", 1e300), ("peak_memory_gib", 1e300), ("accept_len", 1e300), ("latency.tpot_p99_ms", 1e300),
])
def test_an_absurd_number_from_the_engine_is_a_failed_restart_naming_it(field, value):
    kwargs: dict = {"status": "ok", "passes_tok_s": (100.0,), "wall_s": 60.0,
                    "facts": {F.PHASE_TIMED_S: 10.0}}
    head, _, key = field.partition(".")
    if head == "facts":
        kwargs["facts"] = {**kwargs["facts"], key: value}
    elif head == "latency":
        kwargs["latency"] = {key: value}
    else:
        kwargs[head] = value
    result = RestartResult(**kwargs)
    assert result.status == "failed" and result.error is not None, result
    assert (key or head) in result.error and "\n" not in result.error, result.error
    assert all(abs(v) < 1e15 for v in result.facts.values() if isinstance(v, float)), result.facts
    assert decode(RestartResult, encode(result)).status == "failed"


def test_plausible_engine_numbers_are_believed():
    result = RestartResult(status="ok", passes_tok_s=(100.0,), startup_s=600.0, peak_memory_gib=120.0,
                           accept_len=3.5, latency={"tpot_p99_ms": 40.0},
                           facts={F.PHASE_LOAD_S: 3600.0, F.PHASE_COMPILE_S: 0.0})
    assert result.ok and result.facts[F.PHASE_LOAD_S] == 3600.0


def test_a_cmd_engine_phase_of_1e300_seconds_is_a_failed_restart_and_prices_nothing(tmp_path):
    from autotune.core.records import EngineConfig, Workload
    from autotune.engines.cmd import CmdEngine
    from autotune.study._budget import PhasedStart

    script = tmp_path / "engine.py"
    line = {"status": "ok", "passes_tok_s": [100.0], "phases": {"load": 1e300},
            "resolved": {"cudagraph_mode": "NONE", "cudagraph_capture_sizes": []}}
    script.write_text(f"import sys; sys.stdin.read(); print({json.dumps(json.dumps(line))})\n")
    import sys
    engine = CmdEngine(command=[sys.executable, str(script)])
    result = engine.run_restart(EngineConfig(engine_args={"model": "m"}), Workload(num_prompts=1), restart=0, seed=0)
    assert result.status == "failed" and "phase_load_s" in (result.error or ""), result
    assert F.PHASE_LOAD_S not in result.facts
    start = PhasedStart.of("k", result)
    assert start is None or start.fixed_s < 1e6


# -- principle 1: every command refuses the same bad space with the same line -----------------------------------

_VLLM = {"name": "vllm"}
_BAD_SPACES = {
    "floor-lots": lambda d: d.update(engine={**_VLLM, "memory_floor_gib": "lots"}),
    "floor-negative": lambda d: d.update(engine={**_VLLM, "memory_floor_gib": -5}),
    "floor-typo": lambda d: d.update(engine={**_VLLM, "memory_floor_gb": 8}),
    "floor-nested": lambda d: d.update(engine={"name": "sim", "vllm": {"memory_floor_gib": "lots"}}),
    "floor-no-engine-name": lambda d: d.update(engine={"memory_floor_gib": -5}),
    "launcher-placeholder": lambda d: d.update(engine={**_VLLM, "launcher": ["docker", "run", "-v", "{workdri}:/w",
                                                                          "img", "python3"]}),
    "sim-option": lambda d: d["engine"]["sim"].update(profile="nope"),
    "bool-for-int": lambda d: d["engine_args"].update(max_num_seqs=True),
    "huge-size": lambda d: d["workload"].update(num_prompts=10**12),
    "unknown-key": lambda d: d["workload"].update(num_prompt=8),
}


@pytest.mark.parametrize("case", sorted(_BAD_SPACES))
def test_every_command_refuses_a_bad_space_with_the_same_line(tmp_path, capsys, case):
    path = space_file(tmp_path, _BAD_SPACES[case])
    lines = {}
    for name, argv in _commands(tmp_path).items():
        status, out, err = run_cli(argv(path), capsys)
        lines[name] = one_line(err)
        assert status == ExitStatus.BAD_INPUT, (name, lines[name], out)
        assert "nothing to fix" not in out and "cannot import vllm" not in out, (name, out)
        assert lines[name].startswith(f"autotune: error: {path}: "), (name, lines[name])
    assert len(set(lines.values())) == 1, lines
    assert not (tmp_path / "optuna.db").exists(), "tune opened a store for a space it refuses"


# -- principle 6: the store tells the truth -------------------------------------------------------------------------

import shutil  # noqa: E402

from autotune.store import _keys  # noqa: E402

_STORED_KEYS = sorted({v for k, v in vars(_keys).items() if k.endswith("_KEY") and isinstance(v, str)
                       and v.startswith("autotune:")})


def _tampered(src: Path, dst: Path, key: str, value: object, on: str = "both") -> str:
    """A copy of the stored study with ``key`` set to ``value`` on the study and/or its first trial (in SQL: Optuna
    refuses to touch a finished trial)."""
    import json
    import sqlite3

    shutil.copy(src / "optuna.db", dst / "optuna.db")
    con = sqlite3.connect(dst / "optuna.db")
    with con:
        study_id = con.execute("SELECT study_id FROM studies WHERE study_name = 'one'").fetchone()[0]
        if on in ("both", "study"):
            con.execute("DELETE FROM study_user_attributes WHERE study_id = ? AND key = ?", (study_id, key))
            con.execute("INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (?, ?, ?)",
                        (study_id, key, json.dumps(value)))
        if on in ("both", "trial"):
            trial_id = con.execute("SELECT trial_id FROM trials WHERE study_id = ? AND number = 0",
                                   (study_id,)).fetchone()[0]
            con.execute("DELETE FROM trial_user_attributes WHERE trial_id = ? AND key = ?", (trial_id, key))
            con.execute("INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                        (trial_id, key, json.dumps(value)))
    con.close()
    return f"sqlite:///{dst}/optuna.db"


@pytest.mark.parametrize("value", ["garbage", [1, "two"]], ids=["text", "list"])
@pytest.mark.parametrize("key", _STORED_KEYS)
def test_every_stored_key_of_the_wrong_type_is_one_line_or_harmless_in_report(tmp_path, capsys, stored_study, key,
                                                                              value):
    url = _tampered(stored_study, tmp_path, key, value)
    status, _, err = run_cli(["report", "--storage", url, "--study", "one"], capsys)
    if status != ExitStatus.SUCCESS:
        line = one_line(err)
        assert key in line, line
    else:
        assert "Traceback" not in err


@pytest.mark.parametrize(("key", "value"), [("autotune:restarts", "lots"), ("autotune:config", [1, 2])])
def test_a_stored_value_of_the_wrong_type_is_one_line_naming_the_key_and_the_trial(tmp_path, capsys, stored_study,
                                                                                   key, value):
    url = _tampered(stored_study, tmp_path, key, value, on="trial")
    for argv in (["report", "--storage", url, "--study", "one"], ["export", "--storage", url, "--study", "one"],
                 [*tune_argv(tmp_path, space_file(tmp_path))[:-2], "--study", "one", "--storage", url, "--trials", "3"]):
        status, _, err = run_cli(argv, capsys)
        lines = [text for text in err.splitlines() if "autotune: error:" in text]  # after tune's progress bar
        assert len(lines) == 1 and "Traceback" not in err, err
        line = lines[0][lines[0].index("autotune: error:"):]
        assert status != ExitStatus.SUCCESS, (argv[0], line)
        assert key in line and "trial 0" in line, (argv[0], line)


def test_an_unknown_schema_version_is_one_line(tmp_path, capsys, stored_study):
    for value in (99, "two"):
        url = _tampered(stored_study, tmp_path, "autotune:schema_version", value, on="study")
        status, _, err = run_cli(["report", "--storage", url, "--study", "one"], capsys)
        line = one_line(err)
        assert status == ExitStatus.BAD_INPUT and "schema" in line, line


def test_a_locked_store_is_called_locked_not_corrupt(tmp_path, capsys, monkeypatch, stored_study):
    import subprocess
    import sys

    from autotune.store import health

    shutil.copy(stored_study / "optuna.db", tmp_path / "optuna.db")
    monkeypatch.setattr(health, "LOCK_WAIT_S", 0.5)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
         "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(60)", str(tmp_path / "optuna.db")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        url = f"sqlite:///{tmp_path}/optuna.db"
        for argv in (tune_argv(tmp_path, space_file(tmp_path))[:-2] + ["--study", "one", "--storage", url],
                     ["report", "--storage", url, "--study", "one"]):
            status, _, err = run_cli(argv, capsys)
            line = one_line(err)
            assert status != ExitStatus.SUCCESS, line
            assert "locked" in line and "restore" not in line and "not a usable" not in line, line
            assert f"pid {holder.pid}" in line, line
    finally:
        holder.kill()
        holder.wait()
    import sqlite3
    assert sqlite3.connect(tmp_path / "optuna.db").execute("PRAGMA quick_check").fetchone()[0] == "ok"


# -- principle 7: output paths are checked before the work; a closed pipe is not an error -----------------------


def test_a_dangling_symlink_output_is_refused_before_the_study_runs(tmp_path, capsys):
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "gone" / "elsewhere.json")
    status, _, err = run_cli(tune_argv(tmp_path, space_file(tmp_path), "--json", str(link)), capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and "--json" in line and "symbolic link" in line, line
    assert not (tmp_path / "optuna.db").exists(), "the study ran before the output path was checked"


def test_no_output_flag_writes_through_a_symbolic_link(tmp_path, capsys, stored_study):
    url = f"sqlite:///{stored_study}/optuna.db"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    for argv in (["report", "--storage", url, "--study", "one", "--json"],
                 ["export", "--storage", url, "--study", "one", "--out"]):
        link = tmp_path / f"{argv[0]}.yaml"
        link.symlink_to(victim)
        status, _, err = run_cli([*argv, str(link)], capsys)
        line = one_line(err)
        assert status == ExitStatus.BAD_INPUT and "symbolic link" in line, line
        assert victim.read_text() == "keep me\n"


def test_report_into_a_closed_pipe_is_not_an_error(tmp_path, stored_study):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "autotune", "report", "--storage",
                             f"sqlite:///{stored_study}/optuna.db", "--study", "one"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `autotune report | head -0`: the reader is gone before the first line
    err = proc.stderr.read()
    status = proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err and err.strip() == "", err
    assert status in (0, 141), status


# -- principle 1: datasets in every format load or are refused at load ------------------------------------------

_SHAREGPT_ROW = {"conversations": [{"from": "human", "value": "Write a haiku."}, {"from": "gpt", "value": "Snow."}]}


@pytest.mark.parametrize(("name", "body", "spec"), [
    ("prompts.csv", "prompt,output_len\nhello,16\n", None),
    ("prompts.tsv", "prompt\toutput_len\nhello\t16\n", None),
    ("prompts.json", json.dumps([{"prompt": "hello"}, {"prompt": "world"}]), None),
    ("sg.json", json.dumps([{"text": "no conversations"}, {"conversations": [{"from": "human", "value": "x"}]}]),
     {"format": "sharegpt"}),
    ("sg.json", json.dumps({"conversations": []}), {"format": "sharegpt"}),
    ("sg.json", b"[{\"conversations\": [{\"from\": \"human\", \"value\": \"caf\xe9\"}]}]", {"format": "sharegpt"}),
    ("dir", None, None),
])
def test_a_dataset_in_a_format_autotune_does_not_read_is_refused_at_load(tmp_path, capsys, name, body, spec):
    path = tmp_path / name
    if body is None:
        path.mkdir()
    elif isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    dataset = str(path) if spec is None else {**spec, "path": str(path)}
    space = space_file(tmp_path, lambda d: d["workload"].update(dataset=dataset))
    with pytest.raises(SpaceError) as info:
        load_space(space)
    message = str(info.value)
    assert "\n" not in message and ": workload.dataset" in message and name in message, message
    assert "; fix: " in message and ("jsonl" in message if body is not None else "is a directory" in message), message
    status, _, err = run_cli(tune_argv(tmp_path, space), capsys)
    assert status == ExitStatus.BAD_INPUT and one_line(err) == f"autotune: error: {message}"


@pytest.mark.parametrize(("name", "body", "spec"), [
    ("prompts.jsonl", '{"prompt": "hello"}\n{"messages": [{"role": "user", "content": "hi"}]}\n', None),
    ("prompts.txt", '{"prompt": "hello"}\n', None),
    ("sg.json", json.dumps([_SHAREGPT_ROW, {"junk": 1}]), None),
    ("sg.json", json.dumps([_SHAREGPT_ROW]), {"format": "sharegpt"}),
])
def test_a_dataset_in_a_supported_format_loads(tmp_path, name, body, spec):
    path = tmp_path / name
    path.write_text(body)
    dataset = str(path) if spec is None else {**spec, "path": str(path)}
    space = load_space(space_file(tmp_path, lambda d: d["workload"].update(dataset=dataset)))
    assert space.prompts_digest is not None


@pytest.mark.parametrize("item", ["noise=.nan", "memory_floor_gib=.inf", "noise=1.0e+300", "noise=[1, -.inf]",
                                  "noise=[1,", "noise=&a [*a]"])
def test_a_command_line_value_is_read_like_the_space_file(tmp_path, capsys, item):
    """--engine-opt and --params values are YAML: the same reading (aliases bounded) and the same number rule."""
    status, _, err = run_cli(tune_argv(tmp_path, space_file(tmp_path), "--engine-opt", item), capsys)
    line = one_line(err)
    assert status == ExitStatus.BAD_INPUT and f"--engine-opt {item!r}" in line, line
