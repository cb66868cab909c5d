"""Workloads: datasets, sampling, SLO limits and searched engine arguments in a space; the runner's dataset side."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest

from autotune.records import decode, encode
from autotune.engines.vllm import _dataset
from autotune.stats.latency import check_slo, constraint_values, meets_slo, summarize_latency
from autotune.core.records import Dataset, EngineConfig, Resolved, RestartResult, Workload, config_differences
from autotune.config.space import SpaceError, parse_space
from autotune.config.workload import DEFAULT_PROMPTS, default_dataset, unfit_for_serving

BASE = {
    "engine_args": {"model": "org/model"},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 8, "concurrency": 2},
    "search": {"cudagraph_mode": ["NONE"]},
}


def space(**overrides):
    raw = json.loads(json.dumps(BASE))
    for key, value in overrides.items():
        if key in ("workload", "search", "engine_args") and isinstance(value, dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return parse_space(raw, source="s.yaml", base_dir=Path.cwd())


def error(**overrides) -> str:
    with pytest.raises(SpaceError) as info:
        space(**overrides)
    message = str(info.value)
    assert "\n" not in message and message.startswith("s.yaml: ") and "; fix: " in message
    return message


# -- datasets and sampling ----------------------------------------------------------------------------------


def test_dataset_forms(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "hi"}\n')
    share = tmp_path / "sg.json"
    # One conversation: an empty list has no prompt and is refused at load (issue 32), as the engine would mid-study.
    share.write_text('[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]')
    assert space(workload={"dataset": str(jsonl)}).workload.dataset == Dataset("jsonl", path=str(jsonl))
    assert space(workload={"dataset": str(share)}).workload.dataset.source == "sharegpt"
    assert space(workload={"dataset": "synthetic"}).workload.dataset == Dataset("synthetic")
    vllm = space(workload={"dataset": {"vllm": "spec_bench", "path": str(jsonl), "args": {"spec_bench_output_len": 64}}})
    assert vllm.workload.dataset == Dataset("vllm", path=str(jsonl), name="spec_bench",
                                            args=(("spec_bench_output_len", 64),))
    assert space(workload={"temperature": 0.7, "top_p": 0.9}).workload.temperature == 0.7
    # Recorded and read back whole (the study's metadata), hashable (the simulator caches on it).
    wl = vllm.workload
    assert decode(Workload, json.loads(json.dumps(encode(wl)))) == wl and hash(wl)


@pytest.mark.parametrize(("workload", "field"), [
    ({"dataset": "missing.jsonl"}, "workload.dataset: file 'missing.jsonl' does not exist"),
    ({"dataset": {"vllm": "sonnet"}}, "workload.dataset.vllm: unknown vLLM dataset 'sonnet'"),
    ({"dataset": {"format": "csv", "path": "x"}}, "workload.dataset.format: unknown format 'csv'"),
    ({"dataset": {"format": "jsonl"}}, "workload.dataset.path: is missing"),
    ({"temperature": -1}, "workload.temperature: is out of range"),
    ({"top_p": 0}, "workload.top_p: must be above 0"),
    ({"concurrency": "four"}, "workload.concurrency: must be an integer"),
    ({"dataset": "synthetic", "colour": 1}, "workload.colour: unknown key"),
])
def test_bad_workload_is_one_line_naming_the_field(workload, field) -> None:
    assert field in error(workload=workload)


def test_repetitive_prompts_only_with_synthetic_prompts(tmp_path: Path) -> None:
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "hi"}\n')
    assert "workload.repetitive_prompts: applies to synthetic prompts only" in error(
        workload={"dataset": str(jsonl), "repetitive_prompts": True})


def test_default_dataset_is_the_shipped_prompts_unless_the_model_cannot_read_them() -> None:
    assert default_dataset({"model": "org/m"}) == Dataset("jsonl", path=str(DEFAULT_PROMPTS))
    assert default_dataset({"model": "m", "load_format": "dummy"}).source == "synthetic"
    assert default_dataset({"model": "m", "skip_tokenizer_init": True}).source == "synthetic"
    rows = [json.loads(line) for line in DEFAULT_PROMPTS.read_text().splitlines()]
    assert len(rows) >= 200 and all("prompt" in r or "messages" in r for r in rows)
    assert {r["kind"] for r in rows} == {"code", "chat", "summarisation"}


class WordTokenizer:
    """Whitespace tokens; a chat template when ``template`` (enough of a HF tokenizer for the loader)."""

    def __init__(self, template: bool = True) -> None:
        self.chat_template = "yes" if template else None

    def __call__(self, text: str):
        class Encoded:
            input_ids = text.split()
        return Encoded()

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool) -> str:
        assert add_generation_prompt and not tokenize
        return " ".join(f"<{m['role']}> {m['content']}" for m in messages) + " <assistant>"


def test_loader_applies_the_chat_template_skips_long_prompts_and_samples_by_seed(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [{"prompt": f"plain prompt {i}"} for i in range(6)]
    rows.append({"messages": [{"role": "user", "content": "hello there"}], "output_len": 3})
    rows.append({"prompt": " ".join(["long"] * 50)})
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    workload = {"dataset": {"source": "jsonl", "path": str(path)}, "num_prompts": 5, "output_len": 4, "seed": 1}
    got = _dataset.load_requests(workload, WordTokenizer(), max_model_len=20)
    again = _dataset.load_requests(workload, WordTokenizer(), max_model_len=20)
    other = _dataset.load_requests({**workload, "seed": 2}, WordTokenizer(), max_model_len=20)
    assert got == again and got != other, "the draw is the seed's"
    assert len(got) == 5 and all("long" not in r["prompt"] for r in got), "prompts too long for the model are left out"
    assert all(r["prompt"].startswith("<user>") and r["prompt"].endswith("<assistant>") for r in got)
    everything = _dataset.load_requests({**workload, "num_prompts": 14}, WordTokenizer(template=False), 20)
    assert len(everything) == 14 and {r["prompt"] for r in everything} >= {"hello there", "plain prompt 0"}
    assert {r["output_len"] for r in everything} == {3, 4}, "a prompt's own output_len, else the workload's"


def test_sharegpt_uses_the_first_turn_and_the_reply_length(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "tell me"}, {"from": "gpt", "value": "a b c d e f"}]},
        {"conversations": [{"from": "human", "value": "short"}, {"from": "gpt", "value": "no"}]},
        {"conversations": [{"from": "gpt", "value": "starts with the model"}]},
    ]))
    got = _dataset.load_requests({"dataset": {"source": "sharegpt", "path": str(path)}, "num_prompts": 2,
                                  "output_len": 99}, WordTokenizer(), None)
    assert [r["output_len"] for r in got] == [6, 6] and got[0]["prompt"] == "<user> tell me <assistant>"


def test_unreadable_dataset_says_where(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with pytest.raises(_dataset.DatasetError, match=r"bad.jsonl:2: needs a 'prompt'"):
        _dataset.load_requests({"dataset": {"source": "jsonl", "path": str(path)}, "num_prompts": 1,
                                "output_len": 1}, WordTokenizer(), None)


def test_vllm_dataset_options_are_vllm_bench_serve_flags() -> None:
    argv = _dataset.vllm_dataset_argv({"name": "spec_bench", "path": "/d.jsonl",
                                       "args": {"spec_bench_output_len": 64, "disable_shuffle": True}},
                                      {"num_prompts": 8, "seed": 3})
    assert argv == ["--dataset-name", "spec_bench", "--num-prompts", "8", "--seed", "3", "--dataset-path", "/d.jsonl",
                    "--disable-shuffle", "--spec-bench-output-len", "64"]


# -- latency ------------------------------------------------------------------------------------------------


def test_latency_summary_percentiles_and_goodput() -> None:
    # Ten requests: TTFT 0.1..1.0 s, 11 tokens each at 10 ms per token after the first.
    timings = [_dataset.request_timing(0.1 * i, 0.1 * i + 0.1, 11, [0.01] * 10) for i in range(1, 11)]
    out = _dataset.latency_summary(timings, seconds=5.0, slo={"ttft_p99_ms": 500.0, "tpot_p50_ms": 20.0})
    assert out["ttft_p50_ms"] == pytest.approx(550.0) and out["ttft_p99_ms"] == pytest.approx(991.0)
    assert out["tpot_p99_ms"] == pytest.approx(10.0) and out["itl_p90_ms"] == pytest.approx(10.0)
    assert out["request_throughput"] == pytest.approx(2.0) and out["requests"] == 10
    assert out["goodput"] == pytest.approx(5 / 5.0), "requests with TTFT <= 500 ms (and TPOT <= 20 ms) per second"
    assert math.isnan(_dataset.percentile([], 50))


def restart(seed: int, tpot: float, cold: bool = False, **extra) -> RestartResult:
    return RestartResult(status="ok", seed=seed, passes_tok_s=(100.0,), cold=cold,
                         latency={"tpot_p99_ms": tpot, "ttft_p99_ms": 100.0, **extra})


def test_slo_checks_follow_the_interval() -> None:
    latency = summarize_latency([restart(0, 999.0, cold=True), restart(1, 40.0), restart(2, 42.0), restart(3, 41.0)])
    assert latency["tpot_p99_ms"].n == 3 and latency["tpot_p99_ms"].mean == pytest.approx(41.0)
    by_key = {c.key: c for c in check_slo(latency, {"tpot_p99_ms": 50.0, "ttft_p99_ms": 50.0, "e2el_p99_ms": 1.0})}
    assert by_key["tpot_p99_ms"].status == "meets" and not by_key["tpot_p99_ms"].fails
    assert by_key["ttft_p99_ms"].status == "misses" and by_key["ttft_p99_ms"].fails
    assert by_key["e2el_p99_ms"].status == "unmeasured" and by_key["e2el_p99_ms"].fails
    straddle = check_slo(latency, {"tpot_p99_ms": 41.5})[0]
    assert straddle.status == "uncertain" and not straddle.fails, "mean below the limit, interval across it"
    assert check_slo(latency, {"tpot_p99_ms": 40.5})[0].fails, "a mean above the limit cannot win"
    # In key order: e2el (unmeasured: plainly infeasible), then tpot (mean 41 of 82: half the limit).
    assert constraint_values(check_slo(latency, {"tpot_p99_ms": 82.0, "e2el_p99_ms": 1.0})) == [
        1.0, pytest.approx(-0.5)]
    assert meets_slo(check_slo(latency, {"tpot_p99_ms": 50.0})) and meets_slo([])


# -- searched engine arguments --------------------------------------------------------------------------------


def test_engine_args_dimensions_suggest_label_baseline_and_grid() -> None:
    sp = space(search={"engine_args": {"max_num_seqs": [8, 4, 16],
                                       "max_num_batched_tokens": {"low": 512, "high": 8192, "log": True,
                                                                  "baseline": 2048}}})
    assert "max_num_seqs" not in sp.engine_args, "searched, so not defaulted to the concurrency"
    base = sp.baseline()
    assert base.engine_args["max_num_seqs"] == 8 and base.engine_args["max_num_batched_tokens"] == 2048
    assert base.label().endswith("max_num_seqs=8 max_num_batched_tokens=2048")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(12):
        config = sp.suggest(study.ask())
        assert config.engine_args["max_num_seqs"] in (4, 8, 16)
        assert 512 <= config.engine_args["max_num_batched_tokens"] <= 8192
        seen.add(config.engine_args["max_num_seqs"])
    assert seen == {4, 8, 16}
    grid = sp.all_params()
    assert len(grid) == 2 * 3 * 5 and {p["max_num_batched_tokens"] for p in grid} == {512, 1024, 2048, 4096, 8192}
    assert all(p["max_num_seqs"] in (4, 8, 16) for p in grid)


@pytest.mark.parametrize(("engine_args", "field"), [
    ({"max_num_seqs": []}, "search.engine_args.max_num_seqs: is an empty list"),
    ({"max_num_seqs": [4, 4]}, "search.engine_args.max_num_seqs: lists a value twice"),
    ({"model": ["a", "b"]}, "search.engine_args.model: cannot be searched"),
    ({"compilation_config": [{}]}, "search.engine_args.compilation_config: cannot be searched"),
    ({"max_num_batched_tokens": {"low": 10, "high": 5}}, "search.engine_args.max_num_batched_tokens.high: must be above low"),
    ({"max_num_batched_tokens": {"low": 0, "high": 5, "log": True}}, "max_num_batched_tokens.low: must be above 0"),
    ({"max_num_batched_tokens": {"low": 1, "high": 5, "baseline": 9}}, "max_num_batched_tokens.baseline: must be"),
    ({"max_num_batched_tokens": {"low": 1, "high": 5, "step": 1}}, "max_num_batched_tokens.step: unknown key"),
    ({"max_num_seqs": 8}, "search.engine_args.max_num_seqs: must be a list of values or {low, high}"),
])
def test_bad_engine_arg_dimension_is_one_line(engine_args, field) -> None:
    assert field in error(search={"engine_args": engine_args})


def test_engine_arg_fixed_and_searched_is_refused() -> None:
    assert "search.engine_args.max_num_seqs: is also fixed in engine_args" in error(
        engine_args={"max_num_seqs": 4}, search={"engine_args": {"max_num_seqs": [4, 8]}})


def test_searched_engine_args_are_audited_where_the_engine_reports_them() -> None:
    config = EngineConfig(engine_args={"max_num_seqs": 16, "dtype": "auto"}, params={"max_num_seqs": 16})
    ran = Resolved(details={"engine_args": {"max_num_seqs": 8, "dtype": "bfloat16"}})
    assert [str(d) for d in config_differences(config, ran)] == ["max_num_seqs: configured 16 -> resolved 8"]
    assert config_differences(config, Resolved(details={})) == [], "not reported: nothing to compare"


# -- slo / objective in the space, export ---------------------------------------------------------------------


def test_slo_and_objective_validation() -> None:
    sp = space(slo={"tpot_p99_ms": 50, "ttft_p90_ms": 400.5})
    assert sp.slo == {"tpot_p99_ms": 50.0, "ttft_p90_ms": 400.5} and sp.workload.slo == (
        ("tpot_p99_ms", 50.0), ("ttft_p90_ms", 400.5))
    assert "slo.tpot_p95_ms: unknown latency limit" in error(slo={"tpot_p95_ms": 50})
    assert "did you mean e2el_p99_ms" in error(slo={"e2e_p99": 5})
    assert "slo.ttft_p99_ms: must be above 0 ms" in error(slo={"ttft_p99_ms": 0})
    assert "objective: unknown objective 'latency'" in error(objective="latency")
    assert "slo: objective: goodput counts requests meeting the slo limits, but none is set" in error(
        objective="goodput")
    assert "slo.itl_p99_ms: goodput judges each request" in error(objective="goodput",
                                                                  slo={"itl_p99_ms": 5, "tpot_p99_ms": 5})
    good = space(objective="goodput", slo={"tpot_p99_ms": 5})
    assert good.objective == good.workload.objective == "goodput" and good.workload.unit == "req/s"
    assert good.slo == {"tpot_p99_ms": 5.0} and good.slo_constraints == {}, "goodput counts limits per request"
    assert space(slo={"tpot_p99_ms": 5}).slo_constraints == {"tpot_p99_ms": 5.0}


@pytest.mark.parametrize(("workload", "message"), [
    ({"concurrency": [1, 8]}, "workload.aggregate: is missing: 2 load levels need a rule"),
    ({"concurrency": [1, 8], "aggregate": "max"}, "workload.aggregate: unknown aggregate 'max'"),
    ({"concurrency": [], "aggregate": "min"}, "workload.concurrency: is an empty list"),
    ({"concurrency": [1, 0], "aggregate": "min"}, "workload.concurrency: load level 0 is not a whole number >= 1"),
    ({"concurrency": [8, 8], "aggregate": "min"}, "workload.concurrency: repeats a load level"),
    ({"aggregate": "min"}, "workload.aggregate: applies to several load levels"),
    ({"concurrency": [1, 8], "aggregate": "min", "weights": [1, 2]}, "workload.weights: apply to aggregate: mean"),
    ({"concurrency": [1, 8], "aggregate": "mean", "weights": [1]}, "workload.weights: has 1 weights for 2 load"),
    ({"concurrency": [1, 8], "aggregate": "mean", "weights": [1, 0]}, "workload.weights: has a weight of 0"),
    ({"concurrency": [1, 8], "aggregate": "mean", "weights": "1,2"}, "workload.weights: must be a list"),
])
def test_load_level_validation(workload, message) -> None:
    assert message in error(workload=workload)


def test_load_levels_aggregate_as_declared() -> None:
    sp = space(workload={"concurrency": [1, 8, 32], "aggregate": "mean", "weights": [1, 2, 1]})
    wl = sp.workload
    assert wl.levels == (1, 8, 32) and sp.engine_args["max_num_seqs"] == 32, "the engine must hold the top level"
    assert wl.combine([10.0, 20.0, 50.0]) == pytest.approx((10 + 40 + 50) / 4)
    low = space(workload={"concurrency": [1, 8, 32], "aggregate": "min"}).workload
    assert low.combine([10.0, 20.0, 50.0]) == 10.0
    assert decode(Workload, json.loads(json.dumps(encode(wl)))) == wl
    # A single-level throughput workload stores the shape it always had (old studies keep their fingerprint).
    assert set(encode(space().workload)) == set(BASE["workload"]) | {
        "seed", "warmup_passes", "max_warmup_passes", "timed_passes", "repetitive_prompts", "dataset",
        "temperature", "top_p", "slo"}


def test_test_only_settings_name_each_reason() -> None:
    kwargs = {"model": "m", "load_format": "dummy", "skip_tokenizer_init": True,
              "speculative_config": {"method": "ngram", "synthetic_acceptance_rates": [0.5]}}
    reasons = unfit_for_serving(kwargs)
    assert len(reasons) == 3 and reasons[0].startswith("load_format: dummy")
    assert unfit_for_serving({"model": "m", "speculative_config": {"method": "ngram"}}) == []


# -- the latency plot ------------------------------------------------------------------------------------------


def test_pareto_front_keeps_only_undominated_points() -> None:
    from autotune.report.plots import pareto_front

    points = [(100.0, 10.0), (200.0, 20.0), (150.0, 25.0), (250.0, 40.0), (90.0, 12.0)]
    assert pareto_front(points) == [0, 1, 3], "(150, 25) loses to (200, 20); (90, 12) to (100, 10)"


def test_throughput_vs_latency_plot_marks_the_slo_and_skips_without_latency() -> None:
    from types import SimpleNamespace

    from autotune.report.plots import PlotSkipped, throughput_vs_latency
    from autotune.report.latency import TrialLatency

    report = SimpleNamespace(slo={"tpot_p99_ms": 30.0}, search_latency=(
        TrialLatency(0, "a", "COMPLETE", 100.0, {"tpot_p99_ms": 10.0}),
        TrialLatency(1, "b", "COMPLETE", 200.0, {"tpot_p99_ms": 40.0}, ("tpot_p99_ms",))))
    fig = throughput_vs_latency(report)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["meets the SLOs", "misses an SLO", "Pareto front (more tok/s, less latency)",
                      "SLO tpot_p99_ms <= 30"]
    with pytest.raises(PlotSkipped, match="no trial reported tpot_p99_ms"):
        throughput_vs_latency(SimpleNamespace(slo={}, search_latency=()))
