"""Per-restart facts end to end: recorded vLLM logs -> restart facts -> the trial's record -> the KV audit in the
report and ``autotune audit``; a slow-release fake's settle waits; machine-state departures named by the report."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

from autotune.records import decode, encode
from autotune.config.space import parse_space
from autotune.core import facts
from autotune.core.records import EngineConfig, RestartResult, Workload
from autotune.decisions.racing import RacingPolicy
from autotune.engines.cmd import CmdEngine
from autotune.engines.vllm._kvfacts import log_facts
from autotune.machine import GIB, MeminfoReader, StartSafety
from autotune.report import build_report
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

LOGS = Path(__file__).parents[1] / "data" / "vllm-kv-logs"
#: Two restarts of one H200 configuration (0.1% apart), and one of another configuration (6% fewer KV tokens).
SAME = [LOGS / "h200-v0.26.0-1b0ac9830989-20261130-080915-r0-s0.log",
        LOGS / "h200-v0.26.0-1b0ac9830989-20261130-081051-r1-s1.log"]
OTHER = LOGS / "h200-v0.26.0-9e54f69b31a4-20261130-081256-r0-s0.log"
CPU = LOGS / "vllm-cpu-v0.28.1.dev-public.log"


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="f", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=3, policy=RacingPolicy(min_restarts=2, racing=False), top_k=1, verify_restarts=2,
                sampler="random")
    base.update(kw)
    return StudyOptions(**base)


class LogFacts(FakeEngine):
    """The fake engine, each restart carrying the facts of a recorded vLLM log chosen by ``pick``."""

    def __init__(self, pick, **kw) -> None:
        super().__init__(by_params({("FULL_AND_PIECEWISE", 2): 300.0}), **kw)
        self.pick, self.n = pick, 0

    def run_restart(self, config, workload, *, restart, seed):
        result = super().run_restart(config, workload, restart=restart, seed=seed)
        self.n += 1
        return dataclasses.replace(result, facts=log_facts(str(self.pick(config, self.n))))


def test_kv_facts_from_recorded_logs_reach_the_record_and_the_drift_audit_fires_in_the_report(tmp_path):
    # The baseline alternates between two configurations' logs (6% apart): drift; everything else: one config's.
    baseline = parse_space(SMALL_SPACE).baseline().key()

    def pick(config, n):
        return (OTHER if n % 2 else SAME[0]) if config.key() == baseline else SAME[n % 2]

    ledger = run_study(parse_space(SMALL_SPACE), LogFacts(pick), _options(tmp_path))
    restarts = [r for t in ledger.study.trials for r in ledger.restarts(t)]
    assert restarts and all(r.facts[facts.KV_TOKENS] in (994_800, 995_760, 933_600) for r in restarts)
    assert all(r.facts[facts.MAX_MODEL_LEN] == 1024 and r.facts[facts.WEIGHTS_GIB] > 0 for r in restarts)
    report = build_report(ledger)
    data = json.loads(json.dumps(report.to_json()))
    stored = [r for t in data["search_trials"] for r in t["restarts"]]
    assert stored and all(r["facts"][facts.KV_TOKENS] > 0 for r in stored)  # report --json carries them per restart
    drift = [n for n in report.machine.kv if "KV capacity moved" in n.what]
    assert [n.label for n in drift] == [parse_space(SMALL_SPACE).baseline().label()]
    assert data["machine"]["kv_audit"] and "KV audit (1):" in report.render()


def test_the_kv_bound_audit_fires_on_the_vllm_cpu_log_and_autotune_audit_prints_it(tmp_path):
    # 29,056 tokens of KV cache cannot hold 4 sequences of 4096 + 4096 tokens.
    config = EngineConfig(engine_args={"model": "m", "max_num_seqs": 4})
    result = RestartResult(status="ok", passes_tok_s=(1.0,), facts=log_facts(str(CPU)))
    record = decode(RestartResult, json.loads(json.dumps(encode(result))))
    from autotune.report import kv_findings

    findings = kv_findings(config, [record], {"input_len": 4096, "output_len": 4096})
    assert len(findings) == 1 and "29,056 tokens is below" in findings[0] and "32,768" in findings[0]
    assert kv_findings(config, [record], {"input_len": 16, "output_len": 16}) == []

    # autotune audit: a cmd engine whose restart says what a vLLM CPU start logged.
    script = tmp_path / "engine.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        sys.stdin.read()
        print(json.dumps({"status": "ok", "passes_tok_s": [1.0], "resolved": {}}))
    """))
    from autotune.cli import audit

    class WithLogFacts(CmdEngine):
        def run_restart(self, *a, **kw):
            r = super().run_restart(*a, **kw)
            return dataclasses.replace(r, facts={**r.facts, **log_facts(str(CPU))})

    space = parse_space({**SMALL_SPACE, "workload": {**SMALL_SPACE["workload"], "input_len": 4096,
                                                     "output_len": 4096}})
    import io

    out = io.StringIO()
    original = audit.build_engine
    audit.build_engine = lambda *a, **kw: WithLogFacts(command=[sys.executable, str(script)])
    try:
        audit.run_audit(space, {}, {}, False, out)
    finally:
        audit.build_engine = original
    assert "KV audit: KV capacity 29,056 tokens is below" in out.getvalue()


def test_a_slow_release_makes_the_next_start_wait_and_the_report_says_so(tmp_path):
    fake = tmp_path / "meminfo"

    def write(available: float) -> None:
        fake.write_text(f"MemTotal: {128 * GIB // 1024} kB\nMemAvailable: {int(available) // 1024} kB\n"
                        f"Cached: {2 * GIB // 1024} kB\n")

    write(100 * GIB)
    # The engine "exits" still holding 40 GiB; the fake sleep gives 10 GiB back per second of its fake clock.
    script = tmp_path / "engine.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        sys.stdin.read()
        open({str(fake)!r}, "w").write("MemTotal: {128 * GIB // 1024} kB\\nMemAvailable: {60 * GIB // 1024} kB\\n"
                                       "Cached: {2 * GIB // 1024} kB\\n")
        print(json.dumps({{"status": "ok", "passes_tok_s": [100.0, 100.0], "resolved": {{}}}}))
    """))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        available = MeminfoReader(fake)().available
        write(min(100 * GIB, available + 10 * GIB * seconds))

    engine = CmdEngine(command=[sys.executable, str(script)])
    engine.safety = StartSafety(None, reader=MeminfoReader(fake), gpu_reader=None, kernel_log=None,
                                check_host=True, clock=lambda: now[0], sleep=sleep)
    ledger = run_study(parse_space(SMALL_SPACE), engine, _options(tmp_path, trials=2, verify=False))
    restarts = [r for t in ledger.study.trials for r in ledger.restarts(t)]
    assert not restarts[0].facts[facts.SETTLE_WAITED]  # the first start found memory where the study began
    assert all(r.facts[facts.SETTLE_WAITED] and r.facts[facts.SETTLE_WAIT_S] >= 3.5 for r in restarts[1:])
    report = build_report(ledger)
    assert len(report.machine.settle_waits) == len(restarts) - 1
    assert report.machine.settle_total_s >= 3.5 * (len(restarts) - 1)
    text = report.render()
    assert f"Settle: {len(restarts) - 1} start(s) waited for memory to come back" in text
    assert f"waited {restarts[1].facts[facts.SETTLE_WAIT_S]:.1f} s for memory to come back" in text


def test_departed_machine_states_are_named_by_the_report(tmp_path):
    # Injected states: every restart at 3000 MHz but the third at 1500 (a stuck Grace core), and one throttled GPU.
    def state(n: int) -> dict:
        out = {facts.CPU_MHZ_MEAN: 1500.0 if n == 3 else 3000.0}
        if n == 5:
            out[facts.GPU_THROTTLE] = "gpu0:hw_slowdown"
        return out

    class States(FakeEngine):
        n = 0

        def run_restart(self, config, workload, *, restart, seed):
            result = super().run_restart(config, workload, restart=restart, seed=seed)
            States.n += 1
            return dataclasses.replace(result, facts=state(States.n))

    ledger = run_study(parse_space(SMALL_SPACE), States(by_params({})), _options(tmp_path, verify=False))
    report = build_report(ledger)
    reasons = [n.what for n in report.machine.departures]
    assert len(reasons) == 2
    assert any("CPU clock 1500 MHz is under 70% of the study's median 3000 MHz" in r for r in reasons)
    assert any("GPU throttled (gpu0:hw_slowdown)" in r for r in reasons)
    assert "departed from the study's machine state" in report.render()
    assert len(report.to_json()["machine"]["departures"]) == 2


def test_numeric_facts_reach_mlflow_as_metrics_per_restart_and_strings_stay_out(tmp_path):
    from tests._helpers.tracking import child_runs, client_for, fake_engine, tracked_study

    class WithFacts(FakeEngine):
        def run_restart(self, config, workload, *, restart, seed):
            result = super().run_restart(config, workload, restart=restart, seed=seed)
            return dataclasses.replace(result, facts={facts.SETTLE_WAIT_S: 1.5 + restart, facts.KV_TOKENS: 994_800,
                                                      facts.GPU_THROTTLE: "gpu0:hw_slowdown"})

    base = fake_engine()
    engine = WithFacts(value=base.value, fail=base.fail, resolve=base.resolve, cold_first=True, cold_factor=1.0,
                       facts=base.facts)
    ledger, _ = tracked_study(tmp_path, engine=engine)
    client = client_for(tmp_path)
    parent = client.get_run(ledger.mlflow_parent_run_id())
    runs = child_runs(client, parent, "trial")
    assert runs
    for run in runs:
        number = int(run.data.tags["autotune.trial_number"])
        restarts = ledger.restarts(next(t for t in ledger.study.trials if t.number == number))
        history = client.get_metric_history(run.info.run_id, f"fact.{facts.SETTLE_WAIT_S}")
        assert sorted((m.step, m.value) for m in history) == [(i, 1.5 + r.restart) for i, r in enumerate(restarts)]
        assert f"fact.{facts.GPU_THROTTLE}" not in run.data.metrics
