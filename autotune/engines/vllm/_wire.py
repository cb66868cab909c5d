"""The restart's result as one typed message, :class:`RestartReply`: what an engine process says it measured.

Both engines that run a restart in another process read it: the ``vllm`` runner builds one and prints it as its
``AUTOTUNE_RESULT`` line (:meth:`RestartReply.encode`), the ``vllm`` engine reads that line back
(:meth:`RestartReply.decode`); the ``cmd`` engine's wrapper prints the same message as its last stdout line, and
the ``cmd`` engine decodes it the same way, after its own stricter check of what a third-party wrapper may say
(``engines/cmd.py``: which fields, in which ranges, each mistake named). One encoder, one decoder, one shape.

Imported by :mod:`._runner` from its own directory (the runner runs by path in vLLM's interpreter), so like the
runner it imports only the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Union

__all__ = ["ERROR", "PASS", "READY", "RESULT", "LevelReply", "RestartReply", "WireError"]

#: The line the runner prints once the engine is built (start-up seconds, the resolved configuration, device facts).
READY = "AUTOTUNE_READY"
#: The line the runner prints after every warm-up and timed pass (progress; the engine reads only the others).
PASS = "AUTOTUNE_PASS"
#: The line carrying the :class:`RestartReply`.
RESULT = "AUTOTUNE_RESULT"
#: The line the runner prints about its own failure (exception type and message) before exiting.
ERROR = "AUTOTUNE_ERROR"

#: A JSON value as the message carries it (the resolved configuration, the device, the phases).
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]
#: Where the restart's time went: seconds by phase, counts (warm-up passes, pass rounds), and the warm-up rule that
#: ended the warm-up (a name).
Phases = dict[str, Union[float, int, str, None]]

_STATUSES = ("ok", "failed")


class WireError(ValueError):
    """A result message that is not a :class:`RestartReply` (message: what was wrong, one line)."""


@dataclasses.dataclass(frozen=True)
class LevelReply:
    """One load level of a restart that measured several: its timed passes and request latencies."""

    concurrency: int
    passes_tok_s: tuple[float, ...]
    latency: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RestartReply:
    """One restart as the engine process reports it.

    Attributes:
        status: ``ok``, or ``failed`` with :attr:`error` (the ``cmd`` protocol; the runner reports a failure on its
            ``AUTOTUNE_ERROR`` line instead).
        passes_tok_s: Output tokens/s of each timed pass (with several load levels, every level's in level order).
        warmup_tok_s: Output tokens/s of each warm-up pass.
        passes_s: Seconds each timed pass lasted.
        startup_s: Seconds until the engine was ready, by the process's clock.
        resolved: What the engine ran (``cudagraph_mode``, ``cudagraph_capture_sizes``, ``details``, ...);
            ``None`` when the process could not see it (serve mode reads it from the log).
        device: The device facts the runner saw (vLLM's version, the accelerator).
        accept_len: Mean acceptance length over the timed passes when speculating.
        peak_memory_gib: Peak accelerator memory.
        tokens_per_pass: Output tokens of one timed pass.
        latency: Request latencies over the timed passes (one load level).
        levels: Each load level's passes and latency (several levels).
        phases: Where the restart's time went (the runner: its clocks; a ``cmd`` wrapper: seconds by phase).
        output_tokens: The output check's answer: the first output ids of each chosen prompt, by prompt index.
        cold: The process says this start was cold (a ``cmd`` wrapper; the ``vllm`` engine decides it itself).
        error: Why it failed (``status`` ``failed``).
    """

    status: str = "ok"
    passes_tok_s: tuple[float, ...] = ()
    warmup_tok_s: tuple[float, ...] = ()
    passes_s: tuple[float, ...] = ()
    startup_s: float | None = None
    resolved: dict[str, Json] | None = None
    device: dict[str, Json] | None = None
    accept_len: float | None = None
    peak_memory_gib: float | None = None
    tokens_per_pass: int | None = None
    latency: dict[str, float] = dataclasses.field(default_factory=dict)
    levels: tuple[LevelReply, ...] = ()
    phases: Phases | None = None
    output_tokens: dict[str, list[int]] | None = None
    cold: bool | None = None
    error: str | None = None

    def encode(self) -> str:
        """The message as one line of JSON (fields left at ``None`` are not written)."""
        out: dict[str, object] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if field.name == "levels":
                value = [dataclasses.asdict(level) | {"passes_tok_s": list(level.passes_tok_s)} for level in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        return json.dumps(out, default=str)

    @classmethod
    def decode(cls, data: Mapping[str, object] | str) -> RestartReply:
        """The message from its JSON line, or from the object already parsed from it; ``null`` is "not reported".

        Fields this version does not know are left out (a newer runner's), so only the known ones are checked.

        Raises:
            WireError: the line is not JSON, not an object, or a field has the wrong type (one line naming it).
        """
        if isinstance(data, str):
            line = data
            try:
                data = json.loads(line)
            except ValueError:
                raise WireError(f"the result is not JSON: {_quote(line)}") from None
        if not isinstance(data, Mapping):
            raise WireError(f"the result is not a JSON object: {_quote(json.dumps(data, default=str))}")
        status = data.get("status", "ok")
        if status not in _STATUSES:
            raise WireError(f"'status' must be \"ok\" or \"failed\", got {status!r}")
        error = data.get("error")
        return cls(
            status=str(status),
            passes_tok_s=_numbers(data, "passes_tok_s"),
            warmup_tok_s=_numbers(data, "warmup_tok_s"),
            passes_s=_numbers(data, "passes_s"),
            startup_s=_number(data, "startup_s"),
            resolved=_object(data, "resolved"),
            device=_object(data, "device"),
            accept_len=_number(data, "accept_len"),
            peak_memory_gib=_number(data, "peak_memory_gib"),
            tokens_per_pass=_integer(data.get("tokens_per_pass"), "tokens_per_pass"),
            latency=_latency(data.get("latency"), "latency"),
            levels=_levels(data.get("levels")),
            phases=_phases(data.get("phases")),
            output_tokens=_output_tokens(data.get("output_tokens")),
            cold=_flag(data.get("cold"), "cold"),
            error=None if error is None else str(error),
        )


# -- the decoder's checks: each names the field it refuses ---------------------------------------------------


def _quote(text: str, chars: int = 80) -> str:
    return repr(text if len(text) <= chars else text[:chars] + "...")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(data: Mapping[str, object], name: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if not _finite(value):
        raise WireError(f"'{name}' must be a finite number, got {value!r}")
    assert isinstance(value, (int, float))
    return float(value)


def _numbers(data: Mapping[str, object], name: str) -> tuple[float, ...]:
    value = data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(_finite(x) for x in value):
        raise WireError(f"'{name}' must be a list of finite numbers, got {_quote(json.dumps(value, default=str))}")
    return tuple(float(x) for x in value)


def _integer(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise WireError(f"'{name}' must be an integer, got {value!r}")
    return value


def _flag(value: object, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise WireError(f"'{name}' must be true or false, got {value!r}")


def _object(data: Mapping[str, object], name: str) -> dict[str, Json] | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError(f"'{name}' must be an object, got {_quote(json.dumps(value, default=str))}")
    return {str(k): v for k, v in value.items()}


def _latency(value: object, name: str) -> dict[str, float]:
    """Latency figures by name; a figure reported as ``null`` (not measured) is left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"'{name}' must be an object of numbers, got {_quote(json.dumps(value, default=str))}")
    out: dict[str, float] = {}
    for key, figure in value.items():
        if figure is None:
            continue
        if not _finite(figure):
            raise WireError(f"'{name}.{key}' must be a finite number, got {figure!r}")
        out[str(key)] = float(figure)
    return out


def _levels(value: object) -> tuple[LevelReply, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(level, dict) for level in value):
        raise WireError(f"'levels' must be a list of objects, got {_quote(json.dumps(value, default=str))}")
    out = []
    for i, level in enumerate(value):
        concurrency = _integer(level.get("concurrency"), f"levels[{i}].concurrency")
        if concurrency is None:
            raise WireError(f"'levels[{i}].concurrency' must be an integer, got None")
        out.append(LevelReply(concurrency, _numbers(level, "passes_tok_s"),
                              _latency(level.get("latency"), f"levels[{i}].latency")))
    return tuple(out)


def _phases(value: object) -> Phases | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise WireError(f"'phases' must be an object, got {_quote(json.dumps(value, default=str))}")
    out: Phases = {}
    for key, part in value.items():
        if part is None or isinstance(part, str) or (isinstance(part, (int, float)) and _finite(part)):
            out[str(key)] = part
        else:
            raise WireError(f"'phases.{key}' must be a number of seconds or a name, got {part!r}")
    return out


def _output_tokens(value: object) -> dict[str, list[int]] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
            isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids)
            for ids in value.values()):
        raise WireError(f"'output_tokens' must map prompt indices to lists of token ids, got "
                        f"{_quote(json.dumps(value, default=str))}")
    return {str(k): list(ids) for k, ids in value.items()}
