"""The real vLLM engine: every restart is a fresh process running vLLM's offline ``LLM`` API.

autotune itself never imports vLLM. Each restart runs :mod:`._runner` (a stdlib-only script) in the
interpreter that holds vLLM - this one by default, another venv (``engine.python``) or a container
(``engine.launcher``) - in its own process group, with start-up and measurement deadlines. With a local
interpreter, restarts are forked from a forkserver that has imported vLLM once (:mod:`._host`, owned by a
host process that lives as long as the engine), which saves each restart the interpreter start and the
vLLM import; a launcher cannot fork, so its restarts start a fresh interpreter each (spawn). The runner reports
what vLLM resolved at start-up (the worker's cudagraph mode and capture sizes, with multiprocessing off so the
frontend sees them); :mod:`._logparse` adds every start-up log line that changed the plan.

Engine options (the space's ``engine:`` section or ``--engine-opt KEY=VALUE``):

``python``             interpreter with vLLM (default: this one)
``launcher``           command prefix ending in an interpreter, e.g. ``[docker, run, -i, --rm, IMAGE, python3]``;
                       placeholders ``{workdir}``, ``{study_dir}``, ``{runner_dir}``, ``{image}``, ``{uid}``,
                       ``{gid}`` (also in ``env`` values) are filled in at each launch (:mod:`._container`)
``image``              the container image the launcher runs as ``{image}``; its id and digest are recorded
``mode``               ``offline`` (default; the ``LLM`` API) or ``serve`` (``vllm serve`` + ``vllm bench serve``)
``start_method``       ``forkserver`` (default with a local interpreter) or ``spawn`` (the only one with a launcher)
``startup_timeout_s``  seconds until the engine is ready (default 900)
``measure_timeout_s``  seconds for warm-up and timed passes after that (default 900)
``env``                extra environment for the engine process (e.g. ``VLLM_CPU_KVCACHE_SPACE: 2``)
``cache_root``         ``VLLM_CACHE_ROOT`` (default: ``<cache_dir>/vllm-cache``, study-local; Triton's and
                       FlashInfer's JIT caches go next to it unless the user placed them: :mod:`._caches`)
``extra_args``         extra ``LLM(**kwargs)`` / ``vllm serve`` arguments merged over the configuration
``memory_floor_gib``   kill the engine when host MemAvailable falls below this (default max(8 GiB, 7% of
                       MemTotal), at most a quarter of MemTotal; 0: no floor); see :mod:`autotune.machine`
``settle_timeout_s``   how long each start waits for memory to come back (default 300)
``page_cache``         keep, drop or warm before each start (default: warm on unified memory, else keep)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.records import encode
from autotune.engines._base import EngineBackend, EngineError, EngineOptionError
from autotune.engines._options import OptionValue
from autotune.engines._output_check import check_request, output_facts, skip_reason
from autotune.engines.process import engine_leftovers, kill_started_since, own_tagged
from autotune.engines.vllm import _container
from autotune.core import facts as F
from autotune.core.failure import FailureKind
from autotune.core.secrets import MissingSecret, resolve
from autotune.core.confine import LinkRefused, confined_dir
from autotune.engines.vllm._caches import caches_empty as jit_caches_empty
from autotune.engines.vllm._caches import (STUDY_CACHES, caches_present, jit_cache_env, left_to_user,
                                           record_caches)
from autotune.engines.vllm._forkserver import ForkHost, launch_forked
from autotune.engines.vllm._launcher import LaunchResult, launch
from autotune.engines.vllm._phases import restart_phases
from autotune.engines.vllm._enginelog import EngineLog
from autotune.engines.vllm._logparse import failure_reason, parse_engine_config
from autotune.engines.vllm._kvfacts import KvFacts, kv_audit
from autotune.engines.vllm._options import VllmOptions
from autotune.engines.vllm._wire import RestartReply, WireError
from autotune.engines.vllm.vocabulary import Vocabulary, introspect_source, vocabulary_for
from autotune.core.records import (Detail, EngineConfig, EngineFacts, LevelResult, Resolved, RestartResult, RestartStatus,
                              Workload)
from autotune.config.workload import default_dataset
from autotune.machine import MachineFileError, MemoryNotSettled, StartSafety, hub_cache_dir

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace

__all__ = ["RUNNER_PATH", "KvFacts", "VllmEngine", "VllmOptions", "kv_audit"]

#: The runner script, executed by path in the engine's interpreter (it imports only the stdlib and vLLM).
RUNNER_PATH = Path(__file__).resolve().with_name("_runner.py")
_PROBE_TIMEOUT_S = 180.0
# Imports vLLM and reports versions and the accelerator; run with `python -c` in the engine's interpreter.
_PROBE_SOURCE = introspect_source() + r"""
import json, subprocess
import vllm, torch
facts = {"vllm": vllm.__version__, "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None}
if torch.cuda.is_available():
    facts["gpu"] = torch.cuda.get_device_name(0)
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        facts["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:
        facts["driver"] = None
facts["vocabulary"] = autotune_vocab()
print("AUTOTUNE_RESULT " + json.dumps(facts), flush=True)
"""


def _noise_field(prior: tuple[float, float] | None) -> dict[str, float] | None:
    """The request's ``warmup_noise`` from a noise prior ``(log_sd, df)``; ``None`` without one."""
    return None if prior is None else {"log_sd": prior[0], "df": prior[1]}


def _absolute_if_local(ref: Any) -> Any:
    # A local model path relative to the current directory must survive the runner's own cwd and the log.
    if isinstance(ref, str) and ref and os.path.exists(ref):
        return os.path.abspath(ref)
    return ref


def _engine_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The speculative config as vLLM takes it: local draft paths absolute, synthetic rates cut to K.

    vLLM wants exactly K ``synthetic_acceptance_rates`` (one per draft position), while a space declares one
    draft for every searched K. The rates are per-position and unconditional, so the first K entries of a
    longer list are that same acceptance profile for K draft tokens.
    """
    out = dict(spec)
    if "model" in out:
        out["model"] = _absolute_if_local(out["model"])
    rates = out.get("synthetic_acceptance_rates")
    k = int(out.get("num_speculative_tokens") or 0)
    if isinstance(rates, (list, tuple)) and k and len(rates) > k:
        out["synthetic_acceptance_rates"] = list(rates)[:k]
    return out


class VllmEngine(EngineBackend):
    """Real vLLM, one fresh process per restart (see the module docstring for the options).

    Args:
        cache_dir: Study-local directory for the compile cache, cold-start markers and engine logs
            (a temporary directory when ``None``).
        options: Engine options; validated here.

    Raises:
        EngineError: an unknown option or a bad value.
    """

    name = "vllm"
    #: The options model (:mod:`autotune.engines._options`); an engine's ``settings``.
    Settings = VllmOptions
    #: Issue 32: a third of the fastest start measured here, a forked warm restart of dummy weights on the H200
    #: (29.5 s, docs/measurements/h200-dummy-new.md); empirical.
    LEAST_START_S = 10.0

    def __init__(self, cache_dir: str | None = None, **options: OptionValue) -> None:
        super().__init__(cache_dir, **options)
        self.settings: VllmOptions = VllmOptions.parse(options)
        self._facts: dict[str, Any] | None = None
        self._image: dict[str, Any] = {}
        self._scratch: str | None = None
        self._host: ForkHost | None = None
        self._said_start_method = False
        self._said_not_preloaded = False
        self._said_caches = False
        # The level memory must come back to before each start is measured now, when the study begins. A leftover
        # is a process of ours that no live EngineProcess holds: the forkserver host's session lives on between
        # restarts and is not one.
        try:
            self.safety = StartSafety(self.settings.memory_floor_gib, self.settings.settle_timeout_s,
                                      leftovers=engine_leftovers, page_cache=self.settings.page_cache)
        except MachineFileError as exc:  # the machine's own files (/proc/meminfo): not the user's input
            raise EngineError(f"vllm engine: {exc}") from None
        except ValueError as exc:  # a floor the machine cannot meet (issue 32)
            raise EngineOptionError(f"vllm engine: {exc}") from None

    # -- EngineBackend ---------------------------------------------------------------------------------
    def check(self, space: SearchSpace) -> None:
        """Model paths exist, and the configured interpreter imports vLLM (its version is kept).

        Raises:
            SpaceError: a model path is missing.
            EngineError: vLLM cannot be imported there.
        """
        space.check_model_paths()
        if self.settings.launcher:
            _container.check_runtime(self.settings.launcher)
        if self.settings.mode == "serve" and space.engine_args.get("skip_tokenizer_init"):
            raise EngineError("vllm engine: engine.mode serve needs a tokenizer (vllm bench serve builds text "
                              "prompts), but engine_args.skip_tokenizer_init is set; use engine.mode offline, "
                              "or a model with a tokenizer (engine_args.tokenizer)")
        self._facts = self.probe()
        if self.settings.image and self.settings.launcher:
            self._image = _container.image_facts(self.settings.launcher[0], self.settings.image)

    def describe(self) -> EngineFacts:
        """Engine name, vLLM version, GPU, driver and CUDA version (probing vLLM once if needed)."""
        if self._facts is None:
            try:
                self._facts = self.probe()
            except EngineError:
                return EngineFacts(name=self.name, extra={"mode": self.settings.mode})
        facts = self._facts
        return EngineFacts(
            name=self.name, version=facts.get("vllm"), gpu=facts.get("gpu") or "none (CPU)",
            driver=facts.get("driver") or None, cuda=facts.get("cuda") or None,
            extra={"mode": self.settings.mode, "start_method": self.settings.resolved_start_method(),
                   "interpreter": self.settings.interpreter_label(), "torch": facts.get("torch"), **self._image,
                   # What vLLM's own config classes accept (engines/vllm/vocabulary.py); absent when it could not say.
                   **({"vocabulary": facts["vocabulary"]} if facts.get("vocabulary") else {})},
        )

    def vocabulary(self) -> Vocabulary | None:
        """The names this vLLM accepts: introspected from its config classes, else the table for its version."""
        return vocabulary_for(self.describe())

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        """One fresh engine process: start, warm up until steady, time the passes, stop the whole group."""
        marker = self.cold_marker(config)
        # Cold unless everything this configuration's first start left in the caches is still there (_caches).
        cold = not caches_present(marker, self.work_dir(), Path(self.cache_root()))
        self._confine_caches()
        empty = self.caches_empty()
        request = self.request(config, workload, seed)
        method = self.settings.resolved_start_method()
        self._say_start_method(method)
        self._say_caches_left_to_user()
        try:
            self.safety.settle(request["llm_kwargs"].get("model"), hub_cache_dir(self.runner_env()))
        except (MemoryNotSettled, MachineFileError) as exc:
            raise EngineError(f"vllm engine: {exc}") from None
        guard = self.safety.guard()
        # The launcher makes the engine process; the guard asks engines.process to kill what this autotune tagged
        # since now (its groups, and a container it started) when it trips.
        before = own_tagged()
        guard.attach(lambda: kill_started_since(before))
        launched_at = time.time()
        with guard:
            if guard.trip is not None:
                # Under the floor before anything started (the settle saw it above a moment ago): start nothing.
                return RestartResult.failure(RestartStatus.FAILED, guard.trip.reason(), restart=restart, seed=seed,
                                             failure_kind=FailureKind.GUARD, cold=cold, start_method=method, wall_s=0.0,
                                             facts=self.safety.restart_facts())
            outcome = self._launch(config, request, restart, seed, method)
        if method == "forkserver" and outcome.ready is not None and outcome.ready.get("preloaded") is False:
            self._say_not_preloaded()
        # The restart's log, read and parsed once: the caches, the result, the phases and the facts read it.
        log = EngineLog.read(outcome.log_path)
        if outcome.ready is not None:
            # The caches now hold this configuration: later starts of it are warm while what it left is there.
            record_caches(marker, self.work_dir(), log.text, self.process_env())
        result = self.to_result(outcome, config, restart=restart, seed=seed, cold=cold, start_method=method,
                                launched_at=launched_at, log=log)
        # Memory, machine state and the KV facts of vLLM's log, kept on failed restarts too (a guard trip's most).
        result = dataclasses.replace(result, facts={**result.facts, **self.safety.restart_facts(),
                                                    **log.kv.to_facts(), F.CACHES_EMPTY: empty})
        if guard.trip is not None:
            return dataclasses.replace(result, status=RestartStatus.FAILED, error=guard.trip.reason(),
                                       failure_kind=FailureKind.GUARD,
                                       passes_tok_s=(), log_tail=outcome.tail)
        return result

    def caches_empty(self) -> bool:
        """Whether the study's JIT caches hold nothing yet: the next start compiles what every configuration shares."""
        return jit_caches_empty(Path(self.cache_root()), self.process_env())

    def _launch(self, config: EngineConfig, request: dict[str, Any], restart: int, seed: int,
                method: str) -> LaunchResult:
        if method == "forkserver":
            log_path = self.log_path(config, restart, seed)
            try:
                host = self.fork_host()
            except OSError as exc:
                outcome = LaunchResult(returncode=None, log_path=str(log_path),
                                       error=f"cannot start the forkserver host with "
                                             f"{self.settings.interpreter_label()!r}: {exc.strerror or exc}")
            else:
                outcome = launch_forked(
                    host,
                    request,
                    log_path=log_path,
                    env=self.process_env(),
                    startup_timeout_s=self.settings.startup_timeout_s,
                    measure_timeout_s=self.settings.measure_timeout_s,
                )
        else:
            outcome = launch(
                [*self.interpreter(), str(RUNNER_PATH)],
                log_path=self.log_path(config, restart, seed),
                startup_timeout_s=self.settings.startup_timeout_s,
                measure_timeout_s=self.settings.measure_timeout_s,
                env=self.process_env(),
                stdin_text=json.dumps(request),
            )
        return outcome

    def close(self) -> None:
        """Stop the forkserver host (and with it the forkserver), if one was started."""
        if self._host is not None:
            host, self._host = self._host, None
            host.stop()

    # -- the forkserver host ------------------------------------------------------------------------------
    def fork_host(self) -> ForkHost:
        """The running forkserver host, started on first use and again after it died.

        A host that died is not restarted silently: the restart that was running when it died has already
        failed with the reason; the next restart gets a new host (and pays the vLLM import again).
        """
        if self._host is not None and not self._host.alive():
            self._host.stop()
            self._host = None
        if self._host is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            host = ForkHost(self.interpreter(), self.process_env(),
                            self.confined("logs") / f"forkserver-host-{stamp}-{os.getpid()}.log")
            # An engine dropped without close(), or still open at interpreter exit, stops its host too (the host
            # would otherwise hold vLLM's imports in memory until this process ends).
            weakref.finalize(self, host.stop)
            self._host = host
        return self._host

    def _say_not_preloaded(self) -> None:
        if self._said_not_preloaded:
            return
        self._said_not_preloaded = True
        where = self._host.log_path if self._host is not None else "the forkserver host log"
        print(f"vllm engine: the forkserver could not import vLLM ahead of the restarts (see {where}); each "
              "forked restart imports it itself, as a spawned one would", file=sys.stderr)

    def _say_start_method(self, method: str) -> None:
        # Once per engine, and only where autotune chose for the user: a launcher cannot fork.
        if self._said_start_method:
            return
        self._said_start_method = True
        if method == "spawn" and self.settings.launcher and self.settings.start_method is None:
            print("vllm engine: engine.launcher is set, so every restart starts a fresh interpreter "
                  "(start_method spawn; forkserver restarts need a local interpreter, engine.python)",
                  file=sys.stderr)

    def _say_caches_left_to_user(self) -> None:
        # Once per engine: a JIT cache the user placed stays where they put it, so it does not travel with the study.
        if self._said_caches:
            return
        self._said_caches = True
        placed = left_to_user(os.environ, self.settings.environment())
        if placed:
            print(f"vllm engine: keeping the JIT cache location you set ({', '.join(placed)}); it is not under the "
                  "study's workdir, so a copied workdir does not bring it", file=sys.stderr)

    # -- pieces (public so the audit and tests can use them) --------------------------------------------
    def probe(self) -> dict[str, Any]:
        """Import vLLM in the configured interpreter and return its facts.

        Raises:
            EngineError: vLLM cannot be imported there (the message names the interpreter and the fix).
        """
        # A throw-away directory: check() runs before the study has chosen its cache directory.
        with self.throwaway_workdir() as tmp:
            argv = [*self.interpreter(), "-c", _PROBE_SOURCE]
            outcome = launch(argv, log_path=tmp / "probe.log", startup_timeout_s=_PROBE_TIMEOUT_S,
                             measure_timeout_s=_PROBE_TIMEOUT_S, env=self.process_env(with_cache=False))
            text = Path(outcome.log_path).read_text(errors="replace") if Path(outcome.log_path).exists() else ""
        if outcome.result is not None and outcome.returncode == 0:
            return dict(outcome.result)
        if outcome.error:
            why = outcome.error
        elif outcome.timed_out:
            why = f"importing vllm took more than {_PROBE_TIMEOUT_S:g} s"
        else:
            why = failure_reason(text)
        raise EngineError(
            f"vllm engine: cannot import vllm with {self.settings.interpreter_label()} ({why}); install vllm "
            "there, or set engine.python / engine.launcher, or use --engine sim"
        )

    def request(self, config: EngineConfig, workload: Workload, seed: int) -> dict[str, Any]:
        """The runner's JSON request for one restart."""
        kwargs = config.llm_kwargs()
        kwargs.update(self._resolved(self.settings.extra_args, "extra_args"))
        kwargs["model"] = _absolute_if_local(kwargs.get("model"))
        spec = kwargs.get("speculative_config")
        if spec:
            kwargs["speculative_config"] = _engine_spec(spec)
        kwargs.setdefault("seed", seed)
        return {
            "mode": self.settings.mode,
            "llm_kwargs": kwargs,
            "workload": encode(self.resolve_workload(workload, kwargs)),
            "seed": seed,
            "env": self.runner_env(),
            # Searched engine arguments: the runner reports what vLLM runs for them (the audit compares).
            "audit_args": config.searched_engine_args(),
            # The output check (autotune.core.outputs), unless this configuration's outputs cannot be compared.
            "output_check": None if self.output_check_skipped(config) else check_request(workload),
            # The study's warm-up noise prior (autotune.engines.vllm._warmup); older runners ignore it.
            "warmup_noise": _noise_field(self.warmup_noise.prior()),
        }

    def output_check_skipped(self, config: EngineConfig) -> str | None:
        """Why a restart of ``config`` runs no output check, or ``None`` when it runs one."""
        if self.settings.mode == "serve":
            return "serve mode: the output check runs in offline mode"
        return skip_reason(config)

    @staticmethod
    def resolve_workload(workload: Workload, llm_kwargs: Mapping[str, Any]) -> Workload:
        """The workload with its dataset decided: a space without one gets :func:`default_dataset`."""
        if workload.dataset is not None:
            return workload
        return dataclasses.replace(workload, dataset=default_dataset(llm_kwargs))

    def runner_env(self, with_cache: bool = True) -> dict[str, str]:
        """Variables the runner sets before importing vLLM (they also reach a container this way)."""
        env: dict[str, str] = {}
        if self.settings.mode == "offline":
            # In-process worker: the frontend's config objects are the worker's resolved view.
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if with_cache:
            env["VLLM_CACHE_ROOT"] = self.cache_root()
            env.update(jit_cache_env(self.work_dir(), os.environ, self.settings.environment()))  # never over the user's
        user = self._resolved(self.settings.env, "env")
        env.update(user)
        if any("{" in v for v in user.values()):
            values = self.placeholders()
            env.update({k: _container.render(v, values) for k, v in user.items()})
        return env

    def _resolved(self, value: Any, option: str) -> Any:
        """An option with its ``${VAR}`` references resolved, for the process being started (the settings, the
        study and ``describe()`` keep the references: autotune.core.secrets)."""
        try:
            return resolve(value, self.settings.field(option))
        except MissingSecret as exc:
            raise EngineError(f"vllm engine: {exc}") from None

    def interpreter(self) -> list[str]:
        """The command prefix that runs Python where vLLM lives, its placeholders filled in."""
        parts = self._resolved(self.settings.interpreter(), "launcher")
        if not any("{" in part for part in parts):
            return parts
        values = self.placeholders()
        return [_container.render(part, values) for part in parts]

    def placeholders(self) -> dict[str, str]:
        """The launcher's placeholders (:mod:`._container`) for this engine's directory."""
        return _container.placeholder_values(self.work_dir(), in_workdir=bool(self.cache_dir),
                                             image=self.settings.image, runner_dir=RUNNER_PATH.parent)

    def process_env(self, with_cache: bool = True) -> dict[str, str]:
        """The engine process's environment: ours plus the runner's variables, unbuffered output."""
        env = dict(os.environ)
        env.update(self.runner_env(with_cache))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @contextlib.contextmanager
    def throwaway_workdir(self) -> Iterator[Path]:
        """A directory removed on leaving, which stands for the study's until the study gives the engine one.

        What runs before a study has its directory (the probe in :meth:`check`, ``autotune doctor``'s import
        check) renders the launcher's placeholders (``{workdir}``) with this one, not with a scratch directory
        that :meth:`work_dir` would make and that would be left behind empty in TMPDIR once the study gives the
        engine its own. A container may leave files here that this user cannot remove (root's, without
        ``--user``); those stay.
        """
        with tempfile.TemporaryDirectory(prefix="autotune-probe-", ignore_cleanup_errors=True) as tmp:
            borrowed = not self.cache_dir and self._scratch is None
            if borrowed:
                self._scratch = tmp
            try:
                yield Path(tmp)
            finally:
                if borrowed:
                    self._scratch = None

    def work_dir(self) -> Path:
        """The study-local directory (``cache_dir``), or a temporary one when none was given."""
        if self.cache_dir:
            return Path(self.cache_dir)
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="autotune-vllm-")
        return Path(self._scratch)

    def confined(self, relative: str | os.PathLike[str]) -> Path:
        """``relative`` under the study's directory, made, each part a real directory (no link out of the study:
        autotune and vLLM write there); a link is an engine error naming it (issue 44)."""
        try:
            return confined_dir(self.work_dir(), relative)
        except LinkRefused as exc:
            raise EngineError(f"vllm engine: {exc}") from None

    def _confine_caches(self) -> None:
        """The caches vLLM fills under the study's directory (the compile cache, Triton's, FlashInfer's) are real
        directories inside it before vLLM writes there: vLLM follows whatever links it finds."""
        env = self.runner_env()
        root = os.path.abspath(self.work_dir())
        for var in ("VLLM_CACHE_ROOT", *STUDY_CACHES):
            value = env.get(var)
            if value and os.path.abspath(value).startswith(root + os.sep):
                self.confined(os.path.relpath(os.path.abspath(value), root))

    def cache_root(self) -> str:
        """``VLLM_CACHE_ROOT`` for the engine: the option, else study-local."""
        # Absolute: a container launcher mounts the study's directory at the same path, but starts elsewhere.
        return self.settings.cache_root or os.path.abspath(self.work_dir() / "vllm-cache")

    def cold_marker(self, config: EngineConfig) -> Path:
        """The file whose presence says this configuration has started before with this cache."""
        return self.work_dir() / "started" / f"{config.key()}.started"

    def log_path(self, config: EngineConfig, restart: int, seed: int) -> Path:
        """A new log file for one restart (restart indices repeat across rounds, so a timestamp is added)."""
        folder = self.confined(Path("logs") / config.key())
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = folder / f"{stamp}-r{restart}-s{seed}.log"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{stamp}-r{restart}-s{seed}-{n}.log"
        return path

    def to_result(self, outcome: LaunchResult, config: EngineConfig, *, restart: int, seed: int,
                  cold: bool, start_method: str | None = None, launched_at: float | None = None,
                  log: EngineLog | None = None) -> RestartResult:
        """Turn a finished launch into a :class:`RestartResult` (a failure is data, never an exception).

        ``log`` is the launch's log already read (:meth:`run_restart`'s); without it the log file is read here.
        """
        log = log if log is not None else EngineLog.read(outcome.log_path)
        text = log.text
        resolved = build_resolved(outcome.ready, log)
        common: dict[str, Any] = {
            "restart": restart, "seed": seed, "cold": cold, "wall_s": outcome.wall_s, "startup_s": outcome.startup_s,
            "resolved": resolved, "log_path": outcome.log_path, "start_method": start_method,
        }
        if outcome.error:
            return RestartResult.failure(RestartStatus.FAILED, outcome.error, failure_kind=outcome.failure_kind,
                                         **common)
        if outcome.timed_out:
            return RestartResult.failure(RestartStatus.TIMEOUT, self._timeout_reason(outcome.timed_out),
                                         log_tail=outcome.tail, **common)
        if outcome.returncode != 0 or outcome.result is None or "passes_tok_s" not in outcome.result:
            sizes = config.capture_sizes or (resolved.cudagraph_capture_sizes if resolved else None)
            reason = failure_reason(text, error=dict(outcome.failure or {}) or None,
                                    capture_sizes=sizes, ready=outcome.ready is not None)
            if outcome.returncode and outcome.returncode < 0 and outcome.failure is None:
                reason = f"engine killed by signal {-outcome.returncode} ({reason})"
            return RestartResult.failure(RestartStatus.FAILED, reason, log_tail=outcome.tail, **common)
        try:
            reply = RestartReply.decode(outcome.result)
        except WireError as exc:  # a runner of another autotune, or one that printed over its own line
            return RestartResult.failure(RestartStatus.FAILED, f"vllm engine: the runner's result line is malformed: "
                                         f"{exc}", log_tail=outcome.tail, **common)
        return RestartResult(
            status=RestartStatus.OK,
            passes_tok_s=reply.passes_tok_s,
            warmup_tok_s=reply.warmup_tok_s,
            passes_s=reply.passes_s,
            facts={**restart_phases(reply.phases, text, launched_at, log.kv),
                   **output_facts(reply.output_tokens, self.output_check_skipped(config))},
            accept_len=reply.accept_len,
            peak_memory_gib=reply.peak_memory_gib,
            latency=reply.latency,
            levels=tuple(LevelResult(lv.concurrency, lv.passes_tok_s, lv.latency) for lv in reply.levels),
            **common,
        )

    def _timeout_reason(self, phase: str) -> str:
        if phase == "startup":
            return (f"engine start-up exceeded {self.settings.startup_timeout_s:g} s "
                    "(raise engine.startup_timeout_s if compiling is just slow)")
        return (f"measurement exceeded {self.settings.measure_timeout_s:g} s after start-up "
                "(raise engine.measure_timeout_s or shrink the workload)")


def build_resolved(ready: Mapping[str, Any] | None, log: EngineLog | str) -> Resolved | None:
    """What the engine ran: the runner's resolved config plus every start-up log line that changed the plan.

    ``log`` is the restart's log, parsed (:class:`EngineLog`) or its text. Returns ``None`` when the engine died
    before saying anything about its configuration.
    """
    if isinstance(log, str):
        log = EngineLog.of(log)
    log_text = log.text
    findings = log.findings
    reported = dict((ready or {}).get("resolved") or {})
    if not reported and ready is not None:
        # Serve mode: the worker lives in the server's engine-core process; its start-up log is what we have.
        reported = parse_engine_config(log_text) or {}
    if not reported and not findings.notes:
        return None
    details = findings.details()
    # The engine's own config objects are authoritative; the log fills in what they do not say.
    details.update({k: v for k, v in Detail.normalise(reported.get("details") or {}).items() if v is not None})
    sizes = reported.get("cudagraph_capture_sizes")
    return Resolved(
        cudagraph_mode=_mode_name(reported.get("cudagraph_mode")),
        cudagraph_capture_sizes=None if sizes is None else tuple(int(s) for s in sizes),
        compile_mode=reported.get("compile_mode"),
        details=details,
        notes=findings.notes,
    )


def _mode_name(mode: Any) -> str | None:
    # vLLM prints CUDAGraphMode members as "CUDAGraphMode.PIECEWISE"; records use the bare name.
    if mode is None:
        return None
    return re.sub(r"^CUDAGraphMode\.", "", str(mode))

