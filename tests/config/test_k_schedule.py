"""K schedules (``num_speculative_tokens_per_batch_size``): the space's checks, the canonical config, the
simulator, the derivation from per-level winners, the audit's readback, the export and a whole study."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from autotune.records import decode, encode
from autotune.cli._main import raw_main
from autotune.cli.export import NoResult, to_cli, to_llm_kwargs, to_vllm_yaml
from autotune.config.space import SpaceError, load_space, parse_space
from autotune.core.records import (Detail, EngineConfig, EngineFacts, LevelResult, Resolved, RestartResult,
                                   config_differences)
from autotune.core.schedule import SCHEDULE_KEY, KSchedule, coverage_problems, supports_schedule
from autotune.decisions.schedule import derive_schedule
from autotune.engines.sim import SimEngine
from autotune.store.ledger import StudyMeta
from autotune.report._report import Budget, CompareResult, Report, TrialCounts, VerificationTable, VerifiedRow

REPO = Path(__file__).resolve().parents[2]
SCHEDULE = [[1, 8, 4], [9, 32, 2], [33, 128, 1]]


def _space(schedules: Any = None, **k_extra: Any) -> dict[str, Any]:
    raw = yaml.safe_load((REPO / "search_spaces" / "demo-levels.yaml").read_text())
    raw = copy.deepcopy(raw)
    raw["search"]["drafts"]["eagle3"]["max_k"] = 4
    if schedules is not None:
        raw["search"]["num_speculative_tokens"]["schedules"] = schedules
    raw["search"]["num_speculative_tokens"].update(k_extra)
    return raw


# -- the schema ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule, field, words", [
    ([[2, 8, 4], [9, 128, 1]], "schedules.bad[0]", "starts at 2, not at 1"),
    ([[1, 8, 4], [10, 128, 1]], "schedules.bad[1]", "leaves a gap: batch sizes 9-9"),
    ([[1, 8, 4], [6, 128, 1]], "schedules.bad[1]", "not ascending"),
    ([[1, 8, 4], [9, 64, 1]], "schedules.bad[1]", "below the highest load level 128"),
    ([[1, 8, 6], [9, 128, 1]], "schedules.bad[0]", "K=6 is outside the draft's allowed range 0-4"),
    ([[1, 8, 4], [32, 9, 1]], "schedules.bad[1]", "ends before it starts"),
    ([[1, 128, 0]], "schedules.bad", "every K is 0"),
    ([], "schedules.bad", "non-empty list"),
])
def test_a_bad_schedule_is_one_line_naming_the_entry(schedule: Any, field: str, words: str) -> None:
    with pytest.raises(SpaceError) as exc:
        parse_space(_space({"bad": schedule}), source="s.yaml")
    text = str(exc.value)
    assert "\n" not in text
    assert exc.value.field == f"search.num_speculative_tokens.{field}", text
    assert words in exc.value.problem, text
    assert "fix:" in text


def test_a_schedule_entry_of_the_wrong_shape_is_refused_by_the_schema() -> None:
    with pytest.raises(SpaceError) as exc:
        parse_space(_space({"bad": [[1, 8]]}), source="s.yaml")
    assert "\n" not in str(exc.value) and "schedules.bad" in exc.value.field


def test_derive_needs_load_levels() -> None:
    raw = _space(schedule="derive")
    raw["workload"]["concurrency"] = 8
    del raw["workload"]["aggregate"]
    with pytest.raises(SpaceError) as exc:
        parse_space(raw, source="s.yaml")
    assert exc.value.field == "search.num_speculative_tokens.schedule" and "one load level" in exc.value.problem


def test_named_schedules_are_searched_and_rebuilt_from_their_params() -> None:
    space = parse_space(_space({"taper": SCHEDULE}), source="s.yaml")
    assert space.derive_schedule  # the default with load levels
    params = {"cudagraph_mode": "FULL_AND_PIECEWISE", "capture_sizes": "default", "k_schedule": "taper",
              "draft": "eagle3"}
    config = space.config_from_params(params)
    assert config.speculative_config[SCHEDULE_KEY] == SCHEDULE
    assert config.num_speculative_tokens == 4
    assert config.label() == "FULL_AND_PIECEWISE default-sizes eagle3 K=4|2|1 @ 1-8|9-32|33-128 max_num_seqs=16"
    assert space.config_from_params(config.params).key() == config.key()
    assert space.params_problem(config.params) is None
    assert space.params_problem({**params, "k_schedule": "nope"}) is not None
    assert any(p.get("k_schedule") == "taper" for p in space.all_params())
    off = parse_space(_space(schedule="off"), source="s.yaml")
    assert not off.derive_schedule and not off.schedules


def test_the_schedule_is_canonical_so_keys_and_labels_are_stable() -> None:
    def config(rows: Any) -> EngineConfig:
        space = parse_space(_space(), source="s.yaml")
        return space.config_from_params({"draft": "eagle3", "k_schedule": rows})

    shuffled = config([[33, 128, 1], [1, 4, 4], [5, 8, 4], [9, 32, 2]])
    assert shuffled.speculative_config[SCHEDULE_KEY] == SCHEDULE
    assert shuffled.key() == config(SCHEDULE).key()
    assert KSchedule.of(SCHEDULE).text() == "4|2|1 @ 1-8|9-32|33-128"
    assert decode(EngineConfig, encode(shuffled)).key() == shuffled.key()


# -- the simulator -------------------------------------------------------------------------------------------


def _config(method: str, mode: str, k: int | None = None, schedule: Any = None, mns: int = 64) -> EngineConfig:
    spec: dict[str, Any] = {"method": method, "model": "org/draft"}
    if schedule is not None:
        spec.update(num_speculative_tokens=KSchedule.of(schedule).max_k, **{SCHEDULE_KEY: KSchedule.of(schedule).to_list()})
    else:
        spec["num_speculative_tokens"] = k
    return EngineConfig(engine_args={"model": "m", "max_num_seqs": mns}, compilation_config={"cudagraph_mode": mode},
                        speculative_config=spec)


def test_the_simulator_runs_each_levels_k_and_reports_the_schedule() -> None:
    engine = SimEngine()
    workload = load_space(REPO / "search_spaces" / "demo-levels.yaml").workload
    schedule = _config("eagle3", "PIECEWISE", schedule=SCHEDULE)
    resolved = engine.resolve(schedule)
    assert resolved.details[Detail.SPEC_SCHEDULE] == SCHEDULE
    assert resolved.cudagraph_mode == "PIECEWISE"
    for level, k in zip(workload.levels, (4, 2, 1)):
        fixed = _config("eagle3", "PIECEWISE", k=k)
        assert engine.true_throughput(schedule, workload.at(level)) == pytest.approx(
            engine.true_throughput(fixed, workload.at(level)))


def test_dynamic_k_on_the_v1_runner_drops_full_graphs_and_the_audit_says_so() -> None:
    engine = SimEngine()
    config = _config("draft_model", "FULL_AND_PIECEWISE", schedule=SCHEDULE)
    resolved = engine.resolve(config)
    assert resolved.cudagraph_mode == "PIECEWISE" and resolved.details[Detail.MODEL_RUNNER] == "v1"
    assert any("need Model Runner V2" in note for note in resolved.notes)
    assert [d.field for d in config_differences(config, resolved)] == ["cudagraph_mode"]
    # eagle3 runs on V2: full graphs kept, nothing changed.
    v2 = _config("eagle3", "FULL_AND_PIECEWISE", schedule=SCHEDULE)
    assert engine.resolve(v2).cudagraph_mode == "FULL_AND_PIECEWISE"
    assert config_differences(v2, engine.resolve(v2)) == []
    # FlashInfer with speculation: PIECEWISE whatever the K.
    flash = dataclasses.replace(_config("eagle3", "FULL", k=2),
                                engine_args={"model": "m", "attention_backend": "FLASHINFER"})
    assert engine.resolve(flash).cudagraph_mode == "PIECEWISE"


def test_a_schedule_on_a_vllm_without_schedules_is_rejected() -> None:
    result = SimEngine(engine_version="0.25.1").run_restart(_config("eagle3", "PIECEWISE", schedule=SCHEDULE),
                                                            load_space(REPO / "search_spaces" / "demo-levels.yaml")
                                                            .workload, restart=0, seed=0)
    assert not result.ok and "needs vLLM >= 0.26.0" in (result.error or "")
    assert supports_schedule("0.26.0") and supports_schedule("0.25.1") is False and supports_schedule("?") is None


# -- the audit reads the schedule back -------------------------------------------------------------------------


def test_the_audit_warns_on_a_downgrade_and_an_ignored_schedule_from_a_readback() -> None:
    configured = _config("eagle3", "FULL_AND_PIECEWISE", schedule=SCHEDULE)
    downgraded = Resolved(cudagraph_mode="CUDAGraphMode.PIECEWISE", cudagraph_capture_sizes=(1, 2, 4, 8),
                          details={Detail.SPEC_SCHEDULE: SCHEDULE})
    assert [(d.field, d.configured, d.resolved) for d in config_differences(configured, downgraded)] == [
        ("cudagraph_mode", "FULL_AND_PIECEWISE", "PIECEWISE")]
    default_mode = dataclasses.replace(configured, compilation_config={})
    assert [d.resolved for d in config_differences(default_mode, downgraded)] == ["PIECEWISE"]
    ignored = Resolved(cudagraph_mode="FULL_AND_PIECEWISE", details={Detail.SPEC_SCHEDULE: None})
    diffs = config_differences(configured, ignored)
    assert [d.field for d in diffs] == [SCHEDULE_KEY] and "ignored" in str(diffs[0].resolved)
    other = Resolved(cudagraph_mode="FULL_AND_PIECEWISE", details={Detail.SPEC_SCHEDULE: [[1, 128, 4]]})
    assert [d.resolved for d in config_differences(configured, other)] == ["4 @ 1-128"]
    # An engine that reports no schedule at all says nothing about it.
    assert config_differences(configured, Resolved(cudagraph_mode="FULL_AND_PIECEWISE")) == []


def test_the_vllm_runner_reads_the_schedule_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    monkeypatch.syspath_prepend(str(REPO / "autotune" / "engines" / "vllm"))
    sys.modules.pop("_facts", None)
    import _facts  # noqa: PLC0415 - the runner's sibling, imported as the runner does
    spec = SimpleNamespace(method="eagle3", num_speculative_tokens=4,
                           num_speculative_tokens_per_batch_size=[(1, 8, 4), (9, 32, 2), (33, 128, 1)])
    comp = SimpleNamespace(cudagraph_mode="CUDAGraphMode.PIECEWISE", cudagraph_capture_sizes=[1, 2, 4, 8], mode=3)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(
        compilation_config=comp, speculative_config=spec, scheduler_config=None)))
    resolved = decode(Resolved, _facts.resolved_config(llm))
    assert resolved is not None and resolved.details[Detail.SPEC_SCHEDULE] == SCHEDULE
    configured = _config("eagle3", "FULL_AND_PIECEWISE", schedule=SCHEDULE)
    assert [d.field for d in config_differences(configured, resolved)] == ["cudagraph_mode"]


def test_capture_coverage_names_each_range_whose_verification_batch_is_not_captured() -> None:
    lines = coverage_problems(KSchedule.of(SCHEDULE), [1, 2, 4, 8, 16, 32, 64], 64)
    assert len(lines) == 2
    assert lines[0].startswith("range 9-32 K=2: verification batches of up to 32 x 3 = 96 tokens")
    assert lines[1].startswith("range 33-128 K=1: verification batches of up to 64 x 2 = 128 tokens")
    assert coverage_problems(KSchedule.of(SCHEDULE), [512], 128) == []


# -- the derivation from per-level winners ---------------------------------------------------------------------


def _restarts(per_level: dict[int, float], n: int = 2) -> list[RestartResult]:
    levels = tuple(LevelResult(c, (v,) * 3) for c, v in per_level.items())
    return [RestartResult("ok", restart=i, seed=i, passes_tok_s=tuple(v for lv in levels for v in lv.passes_tok_s),
                          levels=levels) for i in range(n)]


def test_the_schedule_is_derived_from_the_best_k_at_each_level() -> None:
    k4, k2, k1 = (_config("eagle3", "FULL", k=k) for k in (4, 2, 1))
    other = _config("ngram", "FULL", k=3)  # another draft: not the template's, left out
    evidence = [(k4, _restarts({8: 10.0, 32: 60.0, 128: 90.0})), (k2, _restarts({8: 8.0, 32: 70.0, 128: 100.0})),
                (k1, _restarts({8: 6.0, 32: 65.0, 128: 110.0})), (other, _restarts({8: 99.0, 32: 99.0, 128: 999.0}))]
    derivation = derive_schedule((8, 32, 128), "throughput", evidence, template=k2)
    assert derivation.schedule is not None and derivation.schedule.to_list() == SCHEDULE
    assert [b[:2] for b in derivation.best] == [(8, 4), (32, 2), (128, 1)]
    assert "derived K=4|2|1 @ 1-8|9-32|33-128" in derivation.reason


def test_levels_that_agree_on_k_make_no_schedule_and_say_so() -> None:
    k2, k3 = _config("eagle3", "FULL", k=2), _config("eagle3", "FULL", k=3)
    evidence = [(k2, _restarts({8: 10.0, 32: 80.0})), (k3, _restarts({8: 9.0, 32: 70.0}))]
    derivation = derive_schedule((8, 32), "throughput", evidence, template=k2)
    assert derivation.schedule is None and derivation.reason.startswith("the load levels agree on K=2")
    assert derive_schedule((8,), "throughput", evidence, k2).schedule is None
    assert "no speculative" in derive_schedule((8, 32), "throughput", evidence, None).reason


# -- export -------------------------------------------------------------------------------------------------------


def _report(config: EngineConfig, version: str) -> Report:
    def row(cfg: EngineConfig, mean: float, role: str, speedup: CompareResult | None = None) -> VerifiedRow:
        return VerifiedRow(label=cfg.label(), role=role, trial_number=None, config=cfg, search_mean=None, mean=mean,
                           std=1.0, ci_low=mean - 2, ci_high=mean + 2, values=(mean,) * 3, unstable=False,
                           status="ok", failure=None, accept_len=None, differences=(), speedup=speedup)

    winner = row(config, 130.0, "candidate", CompareResult(1.3, 1.2, 1.4, 0.975, "faster"))
    base = row(EngineConfig(), 100.0, "baseline")
    meta = StudyMeta(engine=EngineFacts(name="vllm", version=version, gpu="NVIDIA H200"))
    return Report(study="s", meta=meta, trials=TrialCounts(), warnings=(), failures=(), budget=Budget(0, 0.0),
                  verification=VerificationTable((winner, base), 3, 6, 1.0), winner=winner, baseline=base,
                  verdict="faster")


def test_export_writes_the_schedule_in_all_three_formats() -> None:
    config = _config("ngram", "FULL_AND_PIECEWISE", schedule=SCHEDULE)
    report = _report(config, "0.26.0")
    data = yaml.safe_load(to_vllm_yaml(report, today="2026-01-02"))
    assert data["speculative-config"][SCHEDULE_KEY] == SCHEDULE
    assert data["speculative-config"]["num_speculative_tokens"] == 4
    words = shlex.split("\n".join(l for l in to_cli(report).split("\n") if not l.startswith("#")).replace("\\\n", " "))
    assert json.loads(words[words.index("--speculative-config") + 1])[SCHEDULE_KEY] == SCHEDULE
    assert to_llm_kwargs(report)["speculative_config"][SCHEDULE_KEY] == SCHEDULE


def test_export_refuses_a_schedule_the_studys_engine_version_cannot_run() -> None:
    report = _report(_config("ngram", "FULL_AND_PIECEWISE", schedule=SCHEDULE), "0.25.1")
    for render in (lambda r: to_vllm_yaml(r), to_cli, to_llm_kwargs):
        with pytest.raises(NoResult) as exc:
            render(report)
        assert "\n" not in str(exc.value) and "needs vLLM >= 0.26.0" in str(exc.value) and "0.25.1" in str(exc.value)
    # A fixed K exports on the same version.
    assert to_llm_kwargs(_report(_config("ngram", "FULL", k=3), "0.25.1"))


# -- a whole study ----------------------------------------------------------------------------------------------


def test_a_study_with_levels_that_disagree_verifies_the_schedule_and_reports_its_verdict(tmp_path: Path) -> None:
    out = io.StringIO()
    args = ["tune", "--space", str(REPO / "search_spaces" / "demo-levels-3.yaml"), "--engine", "sim",
            "--study", "k-schedule", "--fresh", "--trials", "16", "--workdir", str(tmp_path / "w"),
            "--storage", f"sqlite:///{tmp_path}/o.db", "--no-mlflow"]
    assert raw_main(args, out) == 0, out.getvalue()[-2000:]
    report = io.StringIO()
    assert raw_main(["report", "--study", "k-schedule", "--storage", f"sqlite:///{tmp_path}/o.db", "--json",
                     str(tmp_path / "r.json")], report) == 0
    assert raw_main(["report", "--study", "k-schedule", "--storage", f"sqlite:///{tmp_path}/o.db"], report) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    schedule = data["schedule"]
    assert schedule is not None and schedule["reason"].startswith("derived K=")
    labels = [e["label"] for e in data["verification"]["entries"]]
    assert any(" @ " in label for label in labels)
    assert schedule["verdict"] is not None and len(schedule["verdict"]["levels"]) == 3
    assert "K schedule" in report.getvalue()


def test_the_fingerprint_notices_an_edited_schedule_and_older_studies_still_resume() -> None:
    from autotune.store.fingerprint import Fingerprint, fingerprint

    facts = EngineFacts(name="sim", version="0.26.0")
    taper = fingerprint(parse_space(_space({"taper": SCHEDULE}), source="s.yaml"), facts)
    other = fingerprint(parse_space(_space({"taper": [[1, 8, 3], [9, 128, 1]]}), source="s.yaml"), facts)
    assert any("search.k_schedules" in d for d in taper.differences(other))
    older = Fingerprint(taper.model, dict(taper.engine),
                        {k: v for k, v in taper.space.items() if k != "search.k_schedules"})
    assert older.differences(taper) == []


def test_an_engine_config_built_anywhere_holds_its_schedule_canonically() -> None:
    written = EngineConfig(speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                               SCHEDULE_KEY: [(33, 128, 1), (9, 32, 2), (1, 4, 4), (5, 8, 4)]})
    assert written.speculative_config[SCHEDULE_KEY] == SCHEDULE
    assert written.key() == _config("ngram", "FULL", schedule=SCHEDULE).__class__(
        speculative_config={"method": "ngram", "num_speculative_tokens": 4, SCHEDULE_KEY: SCHEDULE}).key()
    malformed = EngineConfig(speculative_config={"method": "ngram", SCHEDULE_KEY: "4|2|1"})
    assert malformed.speculative_config[SCHEDULE_KEY] == "4|2|1"  # left for the engine to refuse
    assert malformed.k_schedule is None and malformed.label()
    workload = load_space(REPO / "search_spaces" / "demo-levels.yaml").workload
    result = SimEngine().run_restart(dataclasses.replace(malformed, speculative_config={
        **malformed.speculative_config, "num_speculative_tokens": 4}), workload, restart=0, seed=0)
    assert not result.ok and SCHEDULE_KEY in (result.error or "")


def test_a_schedule_wins_verification_only_when_clearly_faster_than_the_best_fixed_k() -> None:
    from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate, conclude

    schedule = _config("ngram", "FULL", schedule=SCHEDULE)
    fixed = _config("ngram", "FULL", k=3)
    base = EngineConfig(engine_args={"model": "m"})
    cands = [Candidate(CANDIDATE, fixed, 1), Candidate(CANDIDATE, schedule), Candidate(BASELINE, base)]

    def runs(values: list[float]) -> list[RestartResult]:
        return [RestartResult("ok", restart=i, seed=i, passes_tok_s=(v,)) for i, v in enumerate(values)]

    def winner(schedule_values: list[float]) -> EngineConfig:
        progress = {fixed.key(): runs([100.0, 104.0, 98.0, 101.0, 99.0]), schedule.key(): runs(schedule_values),
                    base.key(): runs([80.0, 82.0, 79.0, 81.0, 80.0])}
        return conclude(cands, progress, 5, 0.95, "t").winner.candidate.config

    assert winner([102.0, 106.0, 97.0, 103.0, 100.0]) == fixed  # the highest mean, but within the noise
    assert winner([120.0, 124.0, 118.0, 121.0, 119.0]) == schedule


def test_a_named_schedule_can_be_enqueued_and_an_unknown_one_is_one_line() -> None:
    from autotune.cli._common import UsageError
    from autotune.cli.tune import enqueue_params

    space = load_space(REPO / "search_spaces" / "h200-moe-schedule.yaml")
    params = enqueue_params(space, "draft=ngram,k_schedule=taper")
    taper = dict(space.schedules)["taper"]
    # The schedule's K is its largest; the configuration carries the schedule itself.
    assert params["num_speculative_tokens"] == taper.max_k == 4
    config = space.config_from_params(params)
    assert config.speculative_config[SCHEDULE_KEY] == taper.to_list()
    with pytest.raises(UsageError, match="k_schedule has no choice 'nope'; use one of fixed, taper"):
        enqueue_params(space, "k_schedule=nope")
    # A value that cannot name a schedule (a list) is the space's one line too, not a TypeError from the lookup.
    with pytest.raises(UsageError, match=r"--enqueue 'k_schedule=\[4\]': k_schedule\[0\]"):
        enqueue_params(space, "k_schedule=[4]")
    # A space without named schedules has no such parameter.
    with pytest.raises(UsageError, match="unknown parameter"):
        enqueue_params(load_space(REPO / "search_spaces" / "demo-levels-2.yaml"), "k_schedule=taper")


def test_queued_fixed_k_configurations_stay_fixed_in_a_space_with_named_schedules(tmp_path: Path) -> None:
    """On the H200 (docs/measurements/h200-moe-schedule.md) ``--enqueue num_speculative_tokens=4,draft=ngram`` and
    the queued baselines left ``k_schedule`` out; Optuna drew it (it is drawn before K) and they ran as the named
    schedule instead: K=4 was never measured. Every queued trial now says ``k_schedule: fixed``."""
    from autotune.cli.tune import enqueue_params

    space = load_space(REPO / "search_spaces" / "h200-moe-schedule.yaml")
    assert all(p["k_schedule"] == "fixed" for p in space.baseline_params())
    assert enqueue_params(space, "num_speculative_tokens=4,draft=ngram")["k_schedule"] == "fixed"
    out = io.StringIO()
    args = ["tune", "--space", str(REPO / "search_spaces" / "h200-moe-schedule.yaml"), "--engine", "sim",
            "--study", "queued", "--fresh", "--trials", "4", "--workdir", str(tmp_path / "w"), "--seed", "0",
            "--storage", f"sqlite:///{tmp_path}/o.db", "--no-mlflow", "--budget-minutes", "120",
            "--enqueue", "draft=ngram,k_schedule=taper", "--enqueue", "num_speculative_tokens=4,draft=ngram"]
    raw_main(args, out)
    assert raw_main(["report", "--study", "queued", "--storage", f"sqlite:///{tmp_path}/o.db", "--json",
                     str(tmp_path / "r.json")], io.StringIO()) == 0
    labels = {t["label"] for t in json.loads((tmp_path / "r.json").read_text())["search_trials"]}
    assert {"default-mode default-sizes no-spec", "default-mode default-sizes ngram K=4",
            "default-mode default-sizes ngram K=4|2 @ 1-8|9-32"} <= labels, labels


def test_the_h200_schedules_recorded_log_reads_as_a_downgrade_to_piecewise() -> None:
    """The start-up log of the K schedule's first H200 start (vLLM 0.26.0, docs/measurements/h200-moe-schedule.md),
    as recorded: vLLM's "Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE" for dynamic K is read as the
    mode it ran, with the line kept as a note."""
    import tarfile

    from autotune.engines.vllm._logparse import parse_startup_log

    with tarfile.open(REPO / "docs" / "measurements" / "h200-moe-schedule" / "sched" / "engine-logs.tar.gz") as tar:
        logs = [tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()]
    scheduled = [text for text in logs if "Dynamic speculative decoding" in text]
    assert scheduled, "the recorded logs hold the schedule's start"
    findings = parse_startup_log(scheduled[0])
    assert findings.mode_changes[-1] == "PIECEWISE"
    assert any(note.startswith("Dynamic speculative decoding changes the target verification length")
               for note in findings.notes)
