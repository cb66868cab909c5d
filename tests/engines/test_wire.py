"""The engines' one result message (engines/vllm/_wire.py): what the runner encodes the engine decodes, the cmd
engine reads the same message, and a malformed result line is a failed restart with a one-line reason."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.core import facts as F
from autotune.core.records import EngineConfig, RestartStatus, Workload
from autotune.engines.cmd import _OkLine, parse_result_line
from autotune.engines.vllm import VllmEngine
from autotune.engines.vllm._passes import reply
from autotune.engines.vllm._wire import LevelReply, RestartReply, WireError


def _pass(tok_s: float, drafts: float) -> dict:
    counters = {"vllm:spec_decode_num_drafts": drafts, "vllm:spec_decode_num_accepted_tokens": 2 * drafts}
    return {"tok_s": tok_s, "seconds": 2.0, "tokens": 64, "before": {}, "counters": counters,
            "timings": [{"ttft": 0.05, "e2el": 0.2, "tpot": 0.01, "itl": None}]}


def test_the_runners_reply_round_trips_through_its_line():
    warmups = [_pass(90.0, 0)]
    one = reply(12.5, {"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2]}, {"vllm": "0.34.0"}, warmups,
                [(None, [_pass(100.0, 4), _pass(110.0, 8)])], 3.5, {}, {"started_at": 1.0, "import_s": 2.0})
    back = RestartReply.decode(one.encode())
    # Compared field by field: the runner's siblings are imported by path (as the runner runs), so its reply is
    # an instance of the same class loaded under another module name.
    assert dataclasses.asdict(back) == dataclasses.asdict(one)
    assert back.passes_tok_s == (100.0, 110.0) and back.warmup_tok_s == (90.0,) and back.passes_s == (2.0, 2.0)
    assert back.latency["ttft_p50_ms"] == pytest.approx(50.0) and back.levels == ()
    assert back.phases is not None and back.phases["warmup_passes"] == 1 and back.tokens_per_pass == 64

    several = reply(1.0, None, {}, warmups, [(1, [_pass(10.0, 4)]), (8, [_pass(50.0, 10)])], None)
    back = RestartReply.decode(several.encode())
    assert dataclasses.asdict(back) == dataclasses.asdict(several) and back.levels[1] == LevelReply(8, (50.0,), back.levels[1].latency)
    assert back.latency == {} and back.resolved is None


@pytest.mark.parametrize("line, problem", [
    ('{"passes_tok_s": "fast"}', "'passes_tok_s' must be a list of finite numbers"),
    ('{"passes_tok_s": [1.0, NaN]}', "'passes_tok_s' must be a list of finite numbers"),
    ('{"passes_tok_s": [1.0], "levels": [{"passes_tok_s": [1.0]}]}', "'levels[0].concurrency' must be an integer"),
    ('{"passes_tok_s": [1.0], "latency": {"ttft_p50_ms": "slow"}}', "'latency.ttft_p50_ms' must be a finite number"),
    ('{"passes_tok_s": [1.0], "status": "maybe"}', "'status' must be \"ok\" or \"failed\""),
    ("[1, 2]", "the result is not a JSON object"),
    ("AUTOTUNE_RESULT {", "the result is not JSON"),
])
def test_a_malformed_reply_is_refused_in_one_line_naming_the_field(line, problem):
    with pytest.raises(WireError) as caught:
        RestartReply.decode(line)
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_the_vllm_engine_fails_a_restart_whose_result_line_is_malformed(tmp_path: Path):
    # A runner that prints a well-formed marker whose message is not a RestartReply: a failed restart, one line.
    script = tmp_path / "fake_runner.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.stdin.read()
        print('AUTOTUNE_READY {"startup_s": 1.0, "resolved": null, "device": {}}', flush=True)
        print('AUTOTUNE_RESULT {"passes_tok_s": ["fast"]}', flush=True)
    """))
    engine = VllmEngine(cache_dir=str(tmp_path / "study"), launcher=[sys.executable, str(script)],
                        startup_timeout_s=30, memory_floor_gib=0)
    result = engine.run_restart(EngineConfig(engine_args={"model": "m"}), Workload(num_prompts=2, input_len=8,
                                output_len=4), restart=0, seed=0)
    assert result.status == RestartStatus.FAILED
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("vllm engine: the runner's result line is malformed: 'passes_tok_s'"), result.error


def test_the_cmd_engine_reads_the_same_message():
    line = ('{"status": "ok", "passes_tok_s": [10.0, 12.0], "resolved": {"cudagraph_mode": "FULL", '
            '"cudagraph_capture_sizes": [1]}, "levels": [{"concurrency": 2, "passes_tok_s": [10.0, 12.0]}]}')
    parsed = parse_result_line("log line\n" + line + "\n")
    assert isinstance(parsed, RestartReply) and parsed == RestartReply.decode(line)
    # Every field a cmd wrapper may send is a field of the message.
    assert set(_OkLine.model_fields) <= {f for f in RestartReply.__dataclass_fields__}


def test_a_restarts_vllm_log_is_read_and_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # The caches, the resolved configuration, the phases and the KV facts all read one EngineLog.
    from autotune.engines.vllm import _enginelog, _kvfacts, _logparse, _phases

    script = tmp_path / "fake_runner.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        sys.stdin.read()
        print("INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 60.72 GiB", flush=True)
        print('AUTOTUNE_READY {"startup_s": 1.0, "resolved": {"cudagraph_mode": "FULL"}, "device": {}}', flush=True)
        print("AUTOTUNE_RESULT " + json.dumps({"passes_tok_s": [100.0], "phases": {"engine_s": 5.0, "timed_s": 1.0}}),
              flush=True)
    """))
    counts = {"kv": 0, "startup": 0}

    def counting(name, parse):
        def wrapped(text):
            counts[name] += 1
            return parse(text)
        return wrapped

    kv, startup = counting("kv", _kvfacts.parse_kv_facts), counting("startup", _logparse.parse_startup_log)
    for module in (_enginelog, _kvfacts, _phases):
        monkeypatch.setattr(module, "parse_kv_facts", kv, raising=False)
    for module in (_enginelog, _logparse):
        monkeypatch.setattr(module, "parse_startup_log", startup, raising=False)
    engine = VllmEngine(cache_dir=str(tmp_path / "study"), launcher=[sys.executable, str(script)],
                        startup_timeout_s=30, memory_floor_gib=0)
    result = engine.run_restart(EngineConfig(engine_args={"model": "m"}), Workload(num_prompts=2, input_len=8,
                                output_len=4), restart=0, seed=0)
    assert result.status == RestartStatus.OK, result.error
    assert result.facts[F.KV_GIB] == pytest.approx(60.72), result.facts
    assert counts == {"kv": 1, "startup": 1}
