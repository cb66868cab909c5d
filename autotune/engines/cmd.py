"""``cmd``: run any engine through a command that speaks a one-line JSON protocol.

Per restart the command runs as a fresh process in its own session (so a timeout can kill everything it spawned)
and gets the configuration as JSON on stdin::

    {"config": encode(config), "llm_kwargs": config.llm_kwargs(), "workload": encode(workload),
     "restart": 0, "seed": 1234, "output_check": {"prompts": [1, 4, ...], "tokens": 32}}

with ``AUTOTUNE_RESTART``, ``AUTOTUNE_SEED`` and, when the study has a cache directory, ``AUTOTUNE_CACHE_DIR`` in
its environment. It may log anything; its LAST stdout line must be one JSON object::

    {"status": "ok", "passes_tok_s": [...], "resolved": {"cudagraph_mode": ..., "cudagraph_capture_sizes": [...]},
     "accept_len": 2.9, "startup_s": 31.0, "warmup_tok_s": [...], "cold": false}
    {"status": "failed", "error": "CUDA out of memory ..."}

``warmup_tok_s``, ``cold``, ``accept_len``, ``peak_memory_gib``, ``latency`` (an object of numbers under
:attr:`~autotune.core.records.RestartResult.latency`'s keys, e.g. ``{"ttft_p99_ms": 120.5, "tpot_p99_ms": 9.1}``, which
``slo:`` limits are checked against) and the other ``resolved`` fields
(``compile_mode``, ``details``, ``notes``) are optional. A workload with load levels (``"concurrency": [1, 8]``)
needs ``"levels": [{"concurrency": 1, "passes_tok_s": [...], "latency": {...}}, ...]``, one entry per level in
order, measured in the one engine start (``passes_tok_s`` then holds every level's timed passes).
``phases`` (optional) says where the restart's time went, in seconds, by the phase names of
:data:`autotune.core.facts.PHASES` without their ``phase_``/``_s`` wrapping (``{"load": 12.0, "compile": 31.5,
"capture": 4.2, "warmup": 6.0, "timed": 15.1}``; any subset): the report totals them and ``--budget-minutes``
prices later starts phase by phase from them, as for the vllm engine. ``output_tokens`` (optional) answers
``output_check`` (``null`` when the configuration's outputs cannot be compared, e.g. synthetic acceptance):
``{"<prompt index>": [token ids], ...}``, the first ``tokens`` output ids of each named prompt generated greedily;
autotune compares them with the baseline's (:mod:`autotune.core.outputs`).

The line is the engines' one result message (:class:`~autotune.engines.vllm._wire.RestartReply`, which the vllm
runner prints too), of which a wrapper may send the fields above. Anything else - a non-zero exit, no JSON, a
missing, unknown or ill-typed field, a negative or non-finite number, a timeout - becomes a failed
:class:`~autotune.core.records.RestartResult` with a one-line reason and the output's tail; this engine never
raises for a bad restart. See ``examples/cmd_engine_example.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.records import decode, encode
from autotune.core import facts as F
from autotune.core.failure import FailureKind
from autotune.core.redact import redact_text
from autotune.core.secrets import MissingSecret, resolve
from autotune.core.confine import open_confined
from autotune.core.inputs import parse_json
from autotune.engines._base import EngineBackend, EngineError, EngineOptionError
from autotune.engines._options import CmdOptions, OptionValue
from autotune.engines._output_check import check_request, output_facts, skip_reason
from autotune.engines.process import EngineProcess, engine_leftovers
from autotune.engines.vllm._wire import RestartReply, WireError
from autotune.machine import MachineFileError, MemoryNotSettled, StartSafety
from autotune.core.records import EngineConfig, EngineFacts, LevelResult, Resolved, RestartResult, RestartStatus, Workload

__all__ = ["CmdEngine", "ProtocolError", "parse_result_line"]

#: Lines of output kept in ``log_tail``.
TAIL_LINES = 40
#: Longest excerpt of a bad line quoted in an error.
QUOTE_CHARS = 80


class ProtocolError(ValueError):
    """The command's last stdout line does not follow the protocol (message: what was wrong, one line)."""


class CmdEngine(EngineBackend):
    """Runs each restart as ``command`` with the configuration as JSON on stdin.

    Args:
        cache_dir: When set, each restart's full output goes to ``cache_dir/logs/<key>-r<restart>.log``
            and the command gets ``AUTOTUNE_CACHE_DIR`` (for its own compile caches).
        command: The command, as a list of strings or one shell-style string (split with :func:`shlex.split`).
        timeout_s: Wall-clock limit per restart (default 1800).
        kill_grace_s: Seconds between SIGTERM and SIGKILL on timeout (default 5).
        memory_floor_gib: Kill the command when host MemAvailable falls below this (default max(8 GiB, 7% of
            MemTotal), at most a quarter of MemTotal; 0: no floor). See :mod:`autotune.machine`.
        settle_timeout_s: How long each start waits for memory to come back (default 300).
        page_cache: keep, drop or warm before each start (default: warm on unified memory, else keep); see
            :mod:`autotune.machine`.

    Raises:
        EngineError: ``command`` missing or malformed, or any bad option (:class:`~autotune.engines._options.CmdOptions`),
            naming ``engine.cmd.<key>``.
    """

    name = "cmd"
    #: The options model (:mod:`autotune.engines._options`); an engine's ``settings``.
    Settings = CmdOptions

    def __init__(self, cache_dir: str | None = None, **options: OptionValue) -> None:
        super().__init__(cache_dir, **options)
        self.settings: CmdOptions = CmdOptions.parse(options)
        # The level memory must come back to before each start is measured now, when the study begins. A leftover
        # is a process of ours that no live EngineProcess holds (another engine's forkserver host is not one).
        try:
            self.safety = StartSafety(self.settings.memory_floor_gib, self.settings.settle_timeout_s,
                                      leftovers=engine_leftovers, page_cache=self.settings.page_cache)
        except MachineFileError as exc:  # the machine's own files (/proc/meminfo): not the user's input
            raise EngineError(f"cmd engine: {exc}") from None
        except ValueError as exc:  # a floor the machine cannot meet (issue 32)
            raise EngineOptionError(f"cmd engine: {exc}") from None

    @property
    def command(self) -> list[str]:
        """The command each restart runs (``engine.cmd.command``, a shell-style string split)."""
        return list(self.settings.command)

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        """Run the command once; never raises for a failing restart. The restart's memory and machine facts
        (:meth:`StartSafety.restart_facts`) are on its result, a failed one's too."""
        result = self._run_restart(config, workload, restart=restart, seed=seed)
        return dataclasses.replace(result, facts={**result.facts, **self.safety.restart_facts()})

    def _run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        payload = json.dumps({
            "config": encode(config),
            "llm_kwargs": config.llm_kwargs(),
            "workload": encode(workload),
            "restart": restart,
            "seed": seed,
            "output_check": None if skip_reason(config) else check_request(workload),
        }, default=str)
        try:
            self.safety.settle(config.engine_args.get("model"))
        except (MemoryNotSettled, MachineFileError) as exc:
            raise EngineError(f"cmd engine: {exc}") from None
        started = time.monotonic()
        try:
            stdout, stderr, returncode = self._run_process(payload, restart, seed)
        except MissingSecret as exc:
            raise EngineError(f"cmd engine: {exc}") from None
        except OSError as exc:
            return RestartResult.failure(RestartStatus.FAILED, f"cmd engine: cannot start {self.command[0]!r}: {exc}",
                                         restart=restart, seed=seed, wall_s=time.monotonic() - started)
        timed_out = returncode is None
        wall_s = time.monotonic() - started
        # Whatever the command printed is redacted before autotune keeps any of it (the log, its tail, the error
        # line): a credential it echoes, the value of every reference resolved above included.
        # (The protocol line is read from the output as printed.)
        shown_out, shown_err = redact_text(stdout), redact_text(stderr)
        log_path = self._write_log(config, restart, shown_out, shown_err)
        common: dict[str, Any] = {"restart": restart, "seed": seed, "wall_s": wall_s, "log_path": log_path}
        tail = _tail(shown_out, shown_err)
        trip = self.safety.last_guard.trip if self.safety.last_guard is not None else None
        if trip is not None:
            return RestartResult.failure(RestartStatus.FAILED, trip.reason(), failure_kind=FailureKind.GUARD,
                                         log_tail=tail, **common)
        if timed_out:
            return RestartResult.failure(RestartStatus.TIMEOUT, f"cmd engine: no result within "
                                         f"{self.settings.timeout_s:g}s; killed the process group", log_tail=tail,
                                         **common)
        try:
            reply = parse_result_line(stdout)
        except ProtocolError as exc:
            reason = redact_text(f"cmd engine: {exc}")  # it may quote the line
            if returncode != 0:
                reason = f"cmd engine: command exited with status {returncode}: {_last_line(shown_err or shown_out)}"
            return RestartResult.failure(RestartStatus.FAILED, reason, log_tail=tail, **common)
        resolved = None if reply.resolved is None else decode(Resolved, reply.resolved)
        if reply.status == RestartStatus.FAILED:
            return RestartResult.failure(RestartStatus.FAILED, redact_text(reply.error or "command reported failure"),
                                         resolved=resolved, cold=bool(reply.cold), log_tail=tail, **common)
        if returncode != 0:
            return RestartResult.failure(RestartStatus.FAILED, f"cmd engine: command reported ok but exited with "
                                         f"status {returncode}", log_tail=tail, **common)
        levels = tuple(LevelResult(lv.concurrency, lv.passes_tok_s, lv.latency) for lv in reply.levels)
        # parse_result_line let only phase names with seconds through.
        phases = {k: float(v) for k, v in (reply.phases or {}).items() if isinstance(v, (int, float))}
        facts = {**output_facts(reply.output_tokens, skip_reason(config)), **F.phase_facts(**phases)}
        if [lv.concurrency for lv in levels] != (list(workload.levels) if len(workload.levels) > 1 else []):
            return RestartResult.failure(
                RestartStatus.FAILED, f"cmd engine: the workload's load levels are {list(workload.levels)} but the "
                f"reply's 'levels' are {[lv.concurrency for lv in levels]} (one entry per level, in order; none for "
                "one level)", log_tail=tail, **common)
        return RestartResult(status=RestartStatus.OK, passes_tok_s=reply.passes_tok_s, warmup_tok_s=reply.warmup_tok_s,
                             resolved=resolved, accept_len=reply.accept_len, startup_s=reply.startup_s,
                             peak_memory_gib=reply.peak_memory_gib, cold=bool(reply.cold), latency=reply.latency,
                             levels=levels, facts=facts, **common)

    def describe(self) -> EngineFacts:
        """The engine name and the command it runs."""
        return EngineFacts(name=self.name, extra={"command": list(self.command)})

    # -- internals -----------------------------------------------------------------------------------------
    def _env(self, restart: int, seed: int) -> dict[str, str]:
        env = dict(os.environ)
        env["AUTOTUNE_RESTART"] = str(restart)
        env["AUTOTUNE_SEED"] = str(seed)
        if self.cache_dir is not None:
            env["AUTOTUNE_CACHE_DIR"] = str(self.cache_dir)
        return env

    def _run_process(self, payload: str, restart: int, seed: int) -> tuple[str, str, int | None]:
        """Run the command once: stdout, stderr and the exit status (``None`` when it timed out).

        Output goes to temporary files rather than pipes, so a child that outlives the command (and inherits its
        stdout) can neither block the wait nor fill a pipe; the wait is on the command alone.

        Raises:
            OSError: the command cannot be started.
        """
        def scratch() -> IO[str]:
            return tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")

        with scratch() as stdin, scratch() as out, scratch() as err:
            stdin.write(payload)
            stdin.seek(0)
            # Leaving this block by any route - a result, a timeout, Ctrl-C, SIGTERM - stops the command's whole
            # process group and anything that escaped it: nothing it started may outlive the restart (an engine
            # core holding GPU memory would spoil the next one) or autotune itself.
            # The memory guard watches from before the start to the end; a trip SIGKILLs the group at once.
            # The command's references (``--api-key ${API_KEY}``) are resolved for the process only: the log, the
            # facts and the stored options keep them (autotune.core.secrets).
            argv = resolve(self.command, self.settings.field("command"))
            with self.safety.guard() as guard, EngineProcess(argv, stdin=stdin, stdout=out, stderr=err,
                                                             env=self._env(restart, seed)) as proc:
                guard.attach(proc.kill_now)  # the group, and a container it started, at once
                try:
                    returncode: int | None = proc.wait(timeout=self.settings.timeout_s)
                except subprocess.TimeoutExpired:
                    returncode = None
                survivors = proc.stop(grace_s=self.settings.kill_grace_s)
            out.seek(0)
            err.seek(0)
            stderr = err.read()
            if survivors:
                stderr += (f"\nautotune: killed {len(survivors)} process(es) that had left the command's process "
                           f"group: {', '.join(map(str, survivors))}\n")
            return out.read(), stderr, returncode

    def _write_log(self, config: EngineConfig, restart: int, stdout: str, stderr: str) -> str | None:
        if self.cache_dir is None:
            return None
        path = Path(self.cache_dir) / "logs" / f"{config.key()}-r{restart}.log"
        try:
            with open_confined(self.cache_dir, os.path.abspath(path)) as fh:  # never through a link out of the study's directory
                fh.write(f"$ {shlex.join(self.command)}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}")
        except OSError:
            return None  # a log we cannot write must not fail the restart
        return str(path)


# -- protocol --------------------------------------------------------------------------------------------


Finite = Annotated[float, Field(allow_inf_nan=False)]
#: Durations, lengths and sizes: a negative latency would meet every slo limit and win.
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Passes = Annotated[list[Finite], Field(min_length=1)]


class _Resolved(BaseModel):
    """``resolved``: what the engine actually ran. Other keys are kept out of the way (``decode(Resolved, ...)``
    reads these), so a wrapper that reports more facts still works."""

    model_config = ConfigDict(strict=True, extra="allow")
    cudagraph_mode: str | None = None
    cudagraph_capture_sizes: list[int] | None = None
    details: dict[str, Any] | None = None
    notes: list[Any] | None = None


class _Level(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    concurrency: int
    passes_tok_s: Passes
    latency: dict[str, NonNegative] | None = None


class _OkLine(BaseModel):
    """The protocol's ``{"status": "ok", ...}`` line."""

    model_config = ConfigDict(strict=True, extra="forbid")
    status: Literal["ok"]
    passes_tok_s: Passes
    resolved: _Resolved
    warmup_tok_s: list[Finite] | None = None
    accept_len: NonNegative | None = None
    startup_s: NonNegative | None = None
    peak_memory_gib: NonNegative | None = None
    cold: bool = False
    latency: dict[str, NonNegative] | None = None
    levels: list[_Level] | None = None
    phases: dict[str, NonNegative] | None = None
    output_tokens: dict[Annotated[str, Field(pattern=r"^[0-9]+$")], list[int]] | None = None


def parse_result_line(stdout: str) -> RestartReply:
    """Parse and type-check the protocol object on the last non-empty stdout line.

    The wrapper speaks the engines' one result message (:class:`~autotune.engines.vllm._wire.RestartReply`, which
    the vllm runner prints too), held here to what a third-party wrapper may say: the fields of :class:`_OkLine`,
    each in its range, every mistake named in one line; then decoded as every engine decodes it.

    Raises:
        ProtocolError: a one-line description of what was wrong.
    """
    line = _last_line(stdout)
    if not line:
        raise ProtocolError("no output on stdout (expected a JSON object on the last line)")
    try:
        data = parse_json(line)
    except ValueError:
        raise ProtocolError(f"last stdout line is not JSON: {_quote(line)}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"last stdout line is JSON but not an object: {_quote(line)}")
    status = data.get("status")
    if status == RestartStatus.FAILED:
        # A failing wrapper's line is read leniently: its error is the message the user needs.
        error = data.get("error")
        if data.get("resolved") is not None:
            _resolved(data["resolved"])
        return RestartReply(status=status, error=str(error) if error else "command reported failure",
                            resolved=dict(data["resolved"]) if data.get("resolved") is not None else None,
                            cold=data["cold"] if isinstance(data.get("cold"), bool) else None)
    if status != RestartStatus.OK:
        raise ProtocolError(f"'status' must be \"ok\" or \"failed\", got {status!r}")
    # null means "not reported" for the optional fields, as it always has.
    given = {k: v for k, v in data.items() if v is not None or k in ("passes_tok_s", "resolved", "cold")}
    try:
        ok = _OkLine.model_validate(given)
    except ValidationError as exc:
        raise ProtocolError(_problem(exc, given)) from None
    _resolved(data["resolved"])
    if ok.phases is not None:
        unknown = sorted(set(ok.phases) - set(F.PHASE_NAMES))
        if unknown:
            raise ProtocolError(f"'phases.{unknown[0]}' is not a phase; use {', '.join(F.PHASE_NAMES)}")
    try:
        return RestartReply.decode(given)
    except WireError as exc:  # the check above is the stricter one: this is a safety net, not a path
        raise ProtocolError(str(exc)) from None


def _resolved(value: Any) -> Resolved:
    if not isinstance(value, Mapping):
        raise ProtocolError(f"'resolved' must be an object with cudagraph_mode and cudagraph_capture_sizes, "
                            f"got {value!r}")
    try:
        _Resolved.model_validate(dict(value))
    except ValidationError as exc:
        raise ProtocolError(_problem(exc, dict(value), prefix=("resolved",))) from None
    return decode(Resolved, value)


_NUMBER_LISTS = ("passes_tok_s", "warmup_tok_s")


def _problem(exc: ValidationError, data: Mapping[str, Any], prefix: tuple[Any, ...] = ()) -> str:
    """pydantic's first error as the protocol's one-line reason, naming the field (``'latency.tpot_p99_ms'``)."""
    error = exc.errors(include_url=False)[0]
    loc, kind = tuple(error["loc"]), error["type"]
    value = error.get("input")
    name = _dotted(prefix + loc)
    whole = _dotted(prefix + loc[:-1]) if loc and isinstance(loc[-1], int) else name
    if kind == "extra_forbidden":
        fields = ", ".join(_Level.model_fields if "levels" in loc[:1] else _OkLine.model_fields)
        return f"'{name}' is not a field of the protocol; use {fields}"
    last_key = next((p for p in reversed(loc) if isinstance(p, str)), "")
    if last_key in _NUMBER_LISTS:
        if kind in ("missing", "list_type", "too_short"):
            return f"'{name}' must be a non-empty list of numbers, got {_at(data, loc)!r}"
        return f"'{whole}' must hold finite numbers, got {value!r}"
    if name.startswith("resolved.cudagraph_capture_sizes"):
        sizes = _at(data, loc[:loc.index("cudagraph_capture_sizes") + 1])
        return f"'resolved.cudagraph_capture_sizes' must be a list of integers, got {sizes!r}"
    if name == "resolved" or name.startswith("resolved.") and kind in ("model_type", "dict_type"):
        return {"resolved": f"'resolved' must be an object with cudagraph_mode and cudagraph_capture_sizes, got "
                            f"{value!r}",
                "resolved.details": "'resolved.details' must be an object",
                }.get(name, f"'{name}' must be an object")
    if name == "resolved.notes":
        return "'resolved.notes' must be a list of strings"
    if name == "resolved.cudagraph_mode":
        return f"'resolved.cudagraph_mode' must be a string, got {value!r}"
    if name == "cold":
        return f"'cold' must be true or false, got {value!r}"
    if name == "levels" or (loc[:1] == ("levels",) and len(loc) == 2):
        return (f"'levels' must be a list of objects like {{\"concurrency\": 8, \"passes_tok_s\": [...]}}, got "
                f"{_quote(json.dumps(data.get('levels'), default=str))}")
    if name.endswith(".concurrency"):
        return f"'{name}' must be an integer, got {value!r}"
    if kind == "dict_type":
        if name == "latency":
            return f"'latency' must be an object like {{\"tpot_p99_ms\": 9.1}}, got {value!r}"
        if name == "phases":
            return f"'phases' must be an object of seconds like {{\"load\": 12.0, \"compile\": 31.5}}, got {value!r}"
        return f"'{name}' must be an object, got {value!r}"
    if kind == "greater_than_equal":
        return f"'{name}' must be >= 0 (a duration, length or size), got {value!r}"
    if kind in ("float_type", "finite_number", "float_parsing"):
        return f"'{name}' must hold finite numbers, got {value!r}"
    return f"'{name}': {error['msg']}, got {_quote(json.dumps(value, default=str))}"


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _at(data: Any, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


# -- helpers ---------------------------------------------------------------------------------------------


def _last_line(text: str) -> str:
    for line in reversed((text or "").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _quote(line: str) -> str:
    return repr(line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS] + "...")


def _tail(stdout: str, stderr: str) -> str:
    lines = (stdout or "").splitlines()[-TAIL_LINES:]
    if stderr and stderr.strip():
        lines += ["--- stderr ---", *stderr.splitlines()[-TAIL_LINES:]]
    return "\n".join(lines)
