"""Read a vLLM start-up log for the lines that change the plan, and a failed log for its one-line reason.

vLLM resolves many settings at start-up and says so only in its log, at WARNING or INFO level, if at all:
a cudagraph mode replaced (``...; setting cudagraph_mode=PIECEWISE``, ``Overriding cudagraph_mode to ...``),
the V2 model runner declined (``Model Runner V2 does not yet support ...; using the V1 model runner``),
async scheduling switched off, and the CUDA-graph capture progress bars that say how many graphs were really
captured. This module turns such a log into :class:`LogFindings`; the engine records them on the restart.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from autotune.core.records import Detail

__all__ = ["LogFindings", "failure_reason", "parse_engine_config", "parse_startup_log"]

# vLLM's logger prefix: "(EngineCore_DP0 pid=164) WARNING 05-14 08:25:39 [compilation.py:1390] message".
_PREFIX = re.compile(
    r"^(?:\([^)]*\)\s+)?(?:\[[^\]]*\]\s*)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+[\d:.]+\s+\[[^\]]*\]\s+"
)
# torch.distributed prefixes every traceback line of a rank with "[rank0]: ".
_RANK = re.compile(r"^\[rank\d+\]:\s?")
_MODE_SET = re.compile(r"setting cudagraph_mode(?:=| to )(?P<mode>[A-Z_]+)", re.IGNORECASE)
_MODE_OVERRIDE = re.compile(
    r"Overriding cudagraph_mode(?: from (?P<from>[A-Z_]+))?(?: (?P<bare>[A-Z_]+))? to (?P<mode>[A-Z_]+)"
)
_GRAPHS_OFF = re.compile(r"Cudagraph is disabled under eager mode|disabling torch\.compile and CUDAGraphs")
_RUNNER_V1 = re.compile(r"Model Runner V2 (?P<why>.*?);? using the V1 model runner")
_ASYNC_OFF = re.compile(r"Async scheduling (?:not supported|is not compatible|will be disabled|is disabled)")
_ASYNC_ON = re.compile(r"Asynchronous scheduling is enabled")
_CAPTURE = re.compile(r"Capturing CUDA graphs \((?P<label>[^)]*)\)\s*:?\s*(?P<pct>\d+)%.*?(?P<done>\d+)/(?P<total>\d+)")
_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Exit))(?::\s*(?P<msg>.*))?$")
_LARGEST = re.compile(r"Profiling CUDA graph memory:.*?largest=(\d+)")
# The engine core's "Initializing a V1 LLM engine (v0.32.0) with config: ... compilation_config={...}" line.
_CONFIG_LINE = re.compile(r"Initializing a V1 LLM engine.*?compilation_config=(?P<cc>\{.*)")
_CC_MODE = re.compile(r"^\{'mode': <\w+\.(?P<mode>\w+)")
_CC_GRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(?P<mode>\w+)")
_CC_SIZES = re.compile(r"'cudagraph_capture_sizes': \[(?P<sizes>[\d, ]*)\]")
#: vLLM >= 0.34 resolves the split sizes in VllmConfig itself, so the engine core's line holds them too.
_CC_SPLIT = {key: re.compile(rf"'{key}': \[(?P<sizes>[\d, ]*)\]")
             for key in (Detail.DECODE_CAPTURE_REQUESTS, Detail.PREFILL_CAPTURE_TOKENS)}
_CC_DECODE_BUDGET = re.compile(rf"'{Detail.DECODE_CAPTURE_MAX_TOKENS}': (?P<value>\d+|None)")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")
# Wrappers that only point at the real cause printed before them.
_GENERIC = re.compile(
    r"See root cause above|Engine core initialization failed|EngineCore encountered an issue|"
    r"EngineDeadError|Engine process failed to start|^\s*$"
)


@dataclasses.dataclass(frozen=True)
class LogFindings:
    """What a start-up log says about the plan.

    Attributes:
        notes: The lines that changed the plan, verbatim (logger prefix removed), in log order, no repeats.
        mode_changes: Each cudagraph mode the engine switched to, in order (the last one is what it ran).
        model_runner: ``"v1"`` when vLLM fell back from the V2 model runner, else ``None`` (not said).
        async_scheduling: ``False`` when switched off, ``True`` when the log says it is on, else ``None``.
        captures: Graph-capture progress per bar label: ``{"decode, FULL": {"done": 35, "total": 35}}``.
    """

    notes: tuple[str, ...] = ()
    mode_changes: tuple[str, ...] = ()
    model_runner: str | None = None
    async_scheduling: bool | None = None
    captures: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        """The findings as ``Resolved.details`` entries (only facts the log stated)."""
        out: dict[str, Any] = {}
        if self.model_runner is not None:
            out[Detail.MODEL_RUNNER] = self.model_runner
        if self.async_scheduling is not None:
            out[Detail.ASYNC_SCHEDULING] = self.async_scheduling
        if self.mode_changes:
            out[Detail.LOG_CUDAGRAPH_MODE] = self.mode_changes[-1]
        if self.captures:
            out[Detail.GRAPHS_CAPTURED] = {label: dict(c) for label, c in self.captures.items()}
        return out


def strip_prefix(line: str) -> str:
    """A log line without vLLM's ``(process) LEVEL date time [file:line]`` prefix; progress bars: last state."""
    line = line.rsplit("\r", 1)[-1].strip()
    line = _RANK.sub("", line)
    return _PREFIX.sub("", line).strip()


def parse_startup_log(text: str) -> LogFindings:
    """Find every start-up line that changed the plan.

    Args:
        text: The engine's log (stdout and stderr together), or any part of it.
    """
    notes: list[str] = []
    modes: list[str] = []
    runner: str | None = None
    async_sched: bool | None = None
    captures: dict[str, dict[str, int]] = {}

    def note(msg: str) -> None:
        if msg not in notes:
            notes.append(msg)

    for raw in text.split("\n"):
        # A progress bar's states arrive on one line separated by carriage returns; each state is parsed.
        for part in raw.split("\r"):
            capture = _CAPTURE.search(part)
            if capture:
                captures[capture["label"].strip()] = {"done": int(capture["done"]), "total": int(capture["total"])}
        msg = strip_prefix(raw)
        if not msg:
            continue
        if m := _MODE_SET.search(msg):
            modes.append(m["mode"].upper())
            note(msg)
        elif m := _MODE_OVERRIDE.search(msg):
            modes.append(m["mode"].upper())
            note(msg)
        elif _GRAPHS_OFF.search(msg):
            modes.append("NONE")
            note(msg)
        if _RUNNER_V1.search(msg):
            runner = "v1"
            note(msg)
        if _ASYNC_OFF.search(msg):
            async_sched = False
            note(msg)
        elif _ASYNC_ON.search(msg) and async_sched is None:
            async_sched = True
    for label, count in captures.items():
        note(f"Capturing CUDA graphs ({label}): {count['done']}/{count['total']}")
    return LogFindings(tuple(notes), tuple(modes), runner, async_sched, captures)


def parse_engine_config(text: str) -> dict[str, Any] | None:
    """The compilation settings the engine core logged at start-up, for when its config objects are out of reach.

    ``vllm serve`` runs the worker in another process, so serve mode reads the resolved configuration from the
    engine core's "Initializing a V1 LLM engine ... with config:" line. That line is printed after the
    platform's changes (the CPU turns every mode into NONE there) but before the worker's: later
    ``setting cudagraph_mode=...`` lines are applied on top, while the worker's silent rounding of capture
    sizes to multiples of 1+K is not visible (the capture progress totals in ``graphs_captured`` are).

    Returns:
        ``{"cudagraph_mode", "cudagraph_capture_sizes", "compile_mode", "details"}``, or ``None`` without that line.
    """
    match = None
    for match in _CONFIG_LINE.finditer(text):
        pass
    if match is None:
        return None
    body = match["cc"]
    mode = _CC_GRAPH_MODE.search(body)
    sizes = _CC_SIZES.search(body)
    compile_mode = _CC_MODE.search(body)
    changes_after = parse_startup_log(text[match.end():]).mode_changes
    details: dict[str, Any] = {Detail.RESOLVED_FROM: "engine-core start-up log (before the worker's capture-size "
                                                     "rounding)"}
    for key, pattern in _CC_SPLIT.items():
        found = pattern.search(body)
        if found is not None:
            details[key] = [int(x) for x in found["sizes"].split(",") if x.strip()]
    budget = _CC_DECODE_BUDGET.search(body)
    if budget is not None:
        details[Detail.DECODE_CAPTURE_MAX_TOKENS] = None if budget["value"] == "None" else int(budget["value"])
    return {
        "cudagraph_mode": changes_after[-1] if changes_after else (mode["mode"] if mode else None),
        "cudagraph_capture_sizes": None if sizes is None else [int(x) for x in sizes["sizes"].split(",") if x.strip()],
        "compile_mode": compile_mode["mode"] if compile_mode else None,
        "details": details,
    }


def failure_reason(
    text: str,
    *,
    error: dict[str, Any] | None = None,
    capture_sizes: list[int] | tuple[int, ...] | None = None,
    ready: bool = False,
) -> str:
    """A one-line reason for a failed engine process.

    CUDA out-of-memory gets a sentence saying when it happened; anything else is the last meaningful
    exception line (vLLM wraps the real cause in generic "see root cause above" errors, which are skipped).

    Args:
        text: The engine log.
        error: The runner's ``AUTOTUNE_ERROR`` payload (``type`` and ``message``), when it printed one.
        capture_sizes: The capture sizes in use, to say which graphs were being captured at an OOM.
        ready: Whether the engine had finished start-up (an OOM after that is a measurement OOM).
    """
    lines = [strip_prefix(line) for line in text.split("\n")]
    if _OOM.search(text) or (error and _OOM.search(f"{error.get('type')}: {error.get('message')}")):
        return _oom_reason(text, capture_sizes, ready)
    if error:
        reason = _meaningful(str(error.get("message") or ""), str(error.get("type") or "Error"))
        if reason:
            return reason
    for line in reversed(lines):
        m = _EXC_LINE.match(line)
        if m and not line.startswith("AUTOTUNE_"):
            reason = _meaningful(m["msg"] or "", m["type"])
            if reason:
                return reason
    for line in reversed(lines):
        if line and not line.startswith(("AUTOTUNE_", "Traceback", "File ", "^")):
            return line[:300]
    return "engine exited without output"


def _meaningful(message: str, exc_type: str) -> str | None:
    """``Type: message`` on one line, or ``None`` when the message is only a pointer to another error.

    Pydantic validation errors span lines ("1 validation error for SpeculativeConfig / Value error, ..."):
    the "Value error" line is the meaningful one.
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return None if _GENERIC.search(exc_type) else exc_type
    value_lines = [line for line in lines if line.startswith(("Value error,", "Assertion failed,"))]
    chosen = value_lines[-1].split(",", 1)[1].strip() if value_lines else lines[-1]
    chosen = re.sub(r"\s*\[type=[^\]]*\]\s*$", "", chosen)
    if _GENERIC.search(chosen):
        return None
    return f"{exc_type}: {chosen}"[:300]


def _oom_reason(text: str, capture_sizes: list[int] | tuple[int, ...] | None, ready: bool) -> str:
    if ready:
        return "CUDA out of memory during measurement"
    capturing = "Capturing CUDA graphs" in text or "capture_model" in text or "_capture_cudagraphs" in text
    if capturing:
        largest = max(capture_sizes) if capture_sizes else None
        if largest is None and (m := _LARGEST.search(text)):
            largest = int(m.group(1))  # engine-default sizes: vLLM logs the largest it is about to capture
        if largest is not None:
            return f"CUDA out of memory while capturing graphs for sizes up to {largest}"
        return "CUDA out of memory while capturing graphs"
    return "CUDA out of memory during start-up (model load, profiling or KV cache)"
