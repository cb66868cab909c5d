"""One settings object: the command line builds :class:`StudyOptions` once, the study stores it, a worker reads
it back."""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
import sys
from pathlib import Path

import pytest

from autotune.records import decode, encode
from autotune.cli._common import command_line, parse_params, write_json
from autotune.cli._main import build_parser
from autotune.cli._tune_settings import TuneSettings
from autotune.cli.tune import enqueue_params
from autotune.config.space import load_space
from autotune.core.redact import REDACTED
from autotune.decisions.racing import RacingPolicy
from autotune.store.ledger import DEFAULT_STORAGE, DEFAULT_WORKDIR, StudyMeta, load
from autotune.study import StudyOptions

FIXTURE = Path(__file__).parents[1] / "data" / "study-6d3c415.db"


def _tune_args(*flags: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    return build_parser().parse_args(["tune", *flags])


def test_the_flags_defaults_are_the_options_defaults(monkeypatch):
    # No default is restated on the command line: tune with no flags runs StudyOptions' own defaults.
    options = TuneSettings.from_cli_args(_tune_args(monkeypatch=monkeypatch)).study_options(study_name="s")
    # One setting the flags imply rather than restate: without --verify-restarts, tune plans verification from the
    # noise; the field's own default (the fixed design) is for studies stored before the plan and callers that set
    # counts.
    assert options == dataclasses.replace(StudyOptions(study_name="s"), verify_planned=True)
    assert TuneSettings.from_cli_args(_tune_args("--verify-restarts", "3", monkeypatch=monkeypatch)).study_options(
        study_name="s") == StudyOptions(study_name="s")
    assert options.storage == DEFAULT_STORAGE and options.workdir == DEFAULT_WORKDIR



def _restated_defaults(source: str) -> list[str]:
    """Where ``tune``'s parser writes a default out instead of reading it from the option classes: a ``default=``
    that is a number or a string, or a help text that spells one (``(default: 20)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flag = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
        for kw in node.keywords:
            if (kw.arg == "default" and isinstance(kw.value, ast.Constant)
                    and isinstance(kw.value.value, (int, float, str)) and not isinstance(kw.value.value, bool)):
                found.append(f"{flag} default={kw.value.value!r}")
            if kw.arg == "help":
                texts = [n.value for n in ast.walk(kw.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                found += [f"{flag} help {text!r}" for text in texts if re.search(r"default:? \d", text)]
    return found


def test_tunes_parser_restates_no_default():
    # The defaults live on StudyOptions' and RacingPolicy's fields; the parser reads them there, so changing one
    # there changes the flag and its help with it.
    import autotune.cli.tune as tune

    assert _restated_defaults(Path(tune.__file__).read_text()) == []


def test_the_restated_default_check_sees_a_number_a_string_and_a_help_text():
    source = ('p.add_argument("--seed", type=int, default=0)\n'
              'p.add_argument("--sampler", default="tpe")\n'
              'p.add_argument("--trials", default=None, help="trials (default: 20)")\n'
              'p.add_argument("--power", help=f"power (default: {X.power})")\n'
              'p.add_argument("--fresh", action="store_true", default=False)\n')
    assert _restated_defaults(source) == ["--seed default=0", "--sampler default='tpe'",
                                          "--trials help 'trials (default: 20)'"]

def test_flags_reach_the_options(monkeypatch):
    args = _tune_args("--trials", "7", "--restarts", "2", "--max-restarts", "4", "--top-k", "2",
                      "--verify-restarts", "4", "--budget-minutes", "90", "--sampler", "gp", "--seed", "3",
                      "--ci-method", "bca", "--no-verify", "--fresh", "--heartbeat", "9", "--workdir", "w",
                      "--storage", "sqlite:///x.db", monkeypatch=monkeypatch)
    options = TuneSettings.from_cli_args(args).study_options(study_name="s", enqueue=[{"num_speculative_tokens": 2}],
                                                             command=("autotune", "tune"))
    assert options == StudyOptions(
        study_name="s", storage="sqlite:///x.db", workdir="w", trials=7,
        policy=RacingPolicy(min_restarts=2, max_restarts=4), top_k=2, verify_restarts=4, budget_minutes=90.0,
        sampler="gp", seed=3, interval_method="bca", fresh=True, verify=False, command=("autotune", "tune"),
        enqueue=({"num_speculative_tokens": 2},), heartbeat_s=9)


def test_implied_defaults_a_restart_budget_bounds_the_trials_and_no_racing_takes_three(monkeypatch):
    options = TuneSettings.from_cli_args(_tune_args("--budget-restarts", "60", "--no-racing",
                                                    monkeypatch=monkeypatch)).study_options(study_name="s")
    assert options.trials == 60 and options.policy.min_restarts == 3 and not options.policy.racing


@pytest.mark.parametrize("changes", [
    {},
    {"top_k": 2, "budget_restarts": 40, "verify": False, "sampler": "gp", "seed": 5, "confidence": 0.9},
    {"budget_minutes": 30.0, "interval_method": "bca", "verify_max_restarts": 3,
     "policy": RacingPolicy(min_restarts=2, max_restarts=5, racing=False)},
])
def test_the_stored_settings_read_back_whole(changes):
    options = dataclasses.replace(StudyOptions(study_name="s", storage="sqlite:///a.db", workdir="w",
                                               heartbeat_s=7, command=("autotune", "tune"),
                                               enqueue=({"num_speculative_tokens": 3},)), **changes)
    stored = decode(StudyMeta, encode(StudyMeta(**options.stored_settings())))  # as the ledger keeps it
    back = StudyOptions.from_meta(stored, study_name="s", storage="sqlite:///a.db", workdir="w", heartbeat_s=7,
                                  command=("autotune", "tune"))
    # top_k is stored resolved (what verification takes), unless a minutes budget alone decides it later.
    expected_top_k = options.top_k if options.top_k_follows_minutes else options.verify_top_k
    assert back == dataclasses.replace(options, top_k=expected_top_k)
    assert back.verify_top_k == options.verify_top_k and back.verify_reserve == options.verify_reserve


def test_every_stored_setting_is_a_study_meta_field():
    fields = {f.name for f in dataclasses.fields(StudyMeta)}
    assert set(StudyOptions(study_name="s").stored_settings()) <= fields


def test_a_study_that_stored_fewer_settings_reads_back_with_the_defaults():
    back = StudyOptions.from_meta(StudyMeta(verify_restarts=2), study_name="old")
    default = StudyOptions(study_name="old")
    assert (back.trials, back.sampler, back.seed, back.confidence, back.verify, back.policy) == (
        default.trials, default.sampler, default.seed, default.confidence, default.verify, default.policy)
    assert back.verify_max_restarts == 2  # stored before extra rounds existed: it never ran them


def test_the_6d3c415_study_reads_back_the_settings_it_was_started_with(tmp_path):
    db = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, db)
    meta = load("old-study", f"sqlite:///{db}").meta()
    options = StudyOptions.from_meta(meta, study_name="old-study", storage=f"sqlite:///{db}")
    assert (options.trials, options.top_k, options.verify_restarts, options.verify_max_restarts) == (5, 1, 2, 5)
    assert options.policy == RacingPolicy() and options.sampler == "tpe" and options.verify


def test_the_command_line_is_recorded_redacted(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/bin/autotune", "worker", "--study", "s", "--engine-opt",
                                      "api_key=sk-live-51Habcdefghijklmnopqrstuv", "--hf-token", "hf_abcdefghijklmnop"])
    recorded = command_line()
    assert recorded[:2] == ("autotune", "worker") and "sk-live-51Habcdefghijklmnopqrstuv" not in " ".join(recorded)
    assert "hf_abcdefghijklmnop" not in recorded and REDACTED in recorded
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest"])
    assert command_line() == ()  # in-process: no command a user could run again


def test_one_parser_for_typed_configurations_with_the_same_short_names():
    assert parse_params(["K=3", "sizes=[1,2]", "mode=FULL", "draft=ngram"], "--params") == {
        "num_speculative_tokens": 3, "capture_sizes": [1, 2], "cudagraph_mode": "FULL", "draft": "ngram"}
    space = load_space("search_spaces/gb10.yaml")
    assert enqueue_params(space, "K=2,draft=ngram") == enqueue_params(space, "num_speculative_tokens=2,draft=ngram")


def test_json_files_are_written_redacted(tmp_path):
    path = tmp_path / "r.json"
    write_json(str(path), {"engine_args": {"api_key": "sk-live-51Habcdefghijklmnopqrstuv", "model": "org/m"}})
    text = path.read_text()
    assert "sk-live" not in text and REDACTED in text and "org/m" in text
