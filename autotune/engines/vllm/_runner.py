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

In ``serve`` mode (:mod:`._serve`) the runner starts ``vllm serve`` as its child and measures each pass with
``vllm bench serve``. Warm-up, pass sizing and the result are the same in both modes (:mod:`._passes`).

It prints marker lines on stdout that the launcher watches:

* ``AUTOTUNE_READY {json}`` once the engine is built: start-up seconds, the resolved configuration, device facts;
* ``AUTOTUNE_PASS {json}`` after every warm-up and timed pass;
* ``AUTOTUNE_RESULT {json}`` at the end: the :class:`._wire.RestartReply` (every pass, the mean acceptance
  length, the latency, the phases), built once by :func:`._passes.reply`;
* ``AUTOTUNE_ERROR {json}`` before exiting non-zero when anything raises.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import time
import traceback

#: When this interpreter started running our code (wall clock: the engine compares it with when it launched us).
_STARTED_AT = time.time()
from typing import TYPE_CHECKING, Any

# The runner runs by path: its sibling modules (stdlib only) are imported from this directory.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if TYPE_CHECKING:  # the type checker reads the same siblings under the package they sit in
    from autotune.engines.vllm import _dataset
    from autotune.engines.vllm._facts import (device_facts, offline_timing, peak_memory_gib, resolved_config,
                                              spec_counters)
    from autotune.engines.vllm._passes import (emit, emit_pass, is_text, load_levels, measure_levels, reply,
                                               time_passes, warm_up)
    from autotune.engines.vllm._serve import serve_measure
    from autotune.engines.vllm._wire import ERROR, READY, RESULT, RestartReply
else:
    import _dataset  # noqa: E402
    from _facts import device_facts, offline_timing, peak_memory_gib, resolved_config, spec_counters  # noqa: E402
    from _passes import (emit, emit_pass, is_text, load_levels, measure_levels, reply,  # noqa: E402
                         time_passes, warm_up)
    from _serve import serve_measure  # noqa: E402
    from _wire import ERROR, READY, RESULT, RestartReply  # noqa: E402

_NGRAM_LEN = 16


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


def measure(request: dict[str, Any]) -> RestartReply:
    """Build the engine, report readiness, warm up, time the passes; returns the result."""
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
    timed: list[tuple[int | None, list[dict[str, Any]]]]
    if levels is not None:
        warmups, timed = measure_levels(lambda c: Passes(llm, prompts, sampling, c), levels, workload,
                                        request.get("warmup_noise"))
    else:
        passes = Passes(llm, prompts, sampling)
        warmups = warm_up(passes, workload, request.get("warmup_noise"))
        timed = [(None, time_passes(passes, workload, warmups))]
    result = reply(startup_s, resolved, device, warmups, timed, peak_memory_gib(), dict(workload.get("slo") or {}),
                   times)
    if request.get("output_check"):
        result = dataclasses.replace(result, output_tokens=output_check(llm, prompts, request["output_check"], seed))
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
        result = serve_measure(request, _STARTED_AT) if request.get("mode") == "serve" else measure(request)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher as a marker line
        traceback.print_exc()
        emit(ERROR, {"type": type(exc).__name__, "message": str(exc)})
        sys.stdout.flush()
        # os._exit: vLLM's atexit hooks can hang on a half-built engine; the launcher kills the group anyway.
        os._exit(1)
    print(f"{RESULT} {result.encode()}", flush=True)
    sys.stderr.flush()
    # Same reason: a finished engine's shutdown hooks can stall; everything we owe is printed.
    os._exit(0)


if __name__ == "__main__":
    main()
