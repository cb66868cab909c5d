"""Searched engine arguments (``search.engine_args``): a list of choices or a numeric range per vLLM argument.

Each searched value is checked against the argument's type in :class:`~autotune.config._models.EngineArgs`, the
same model the fixed ``engine_args`` are validated with, so ``max_num_seqs: [4, true]`` and ``max_num_seqs: true``
are refused alike (issue 32).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from autotune.config._models import engine_arg_problem

__all__ = ["EngineArgDim", "search_dims", "spelled", "typed_choices"]

#: Points a numeric engine-argument range contributes to :meth:`SearchSpace.all_params` (grids, ground truth).
_GRID_POINTS = 5

Fail = Callable[[str, str, str], Exception]


@dataclasses.dataclass(frozen=True)
class EngineArgDim:
    """A searched engine argument (``search.engine_args``): a list of choices or a numeric range.

    Attributes:
        name: vLLM's argument name with underscores (``max_num_seqs``); also the Optuna parameter name.
        choices: The values to choose from, or ``None`` for a range.
        low, high: The range's bounds (inclusive).
        log: Sample the range on a log scale.
        integer: The range holds whole numbers.
        baseline: What the baselines run: the first choice, or the range's ``baseline:`` (default ``low``).
    """

    name: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = True
    baseline: Any = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (e.g. from ``--enqueue``) is not one this dimension can take, or ``None``.

        A value outside the declared choices or range would be measured (and could win) although the search could
        never have suggested it, and Optuna refuses to store it against the declared distribution.
        """
        if self.choices is not None:
            if any(value == c and isinstance(value, bool) == isinstance(c, bool) for c in self.choices):
                return None
            return f"{self.name} {value!r} is not in the space; use one of {', '.join(map(repr, self.choices))}"
        kind = "a whole number" if self.integer else "a number"
        number = isinstance(value, int) if self.integer else isinstance(value, (int, float))
        assert self.low is not None and self.high is not None
        if (isinstance(value, bool) or not number or not math.isfinite(value)
                or not self.low <= value <= self.high):
            return f"{self.name} {value!r} is outside the space; use {kind} from {self.low:g} to {self.high:g}"
        return None

    def suggest(self, trial: Any) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        assert self.low is not None and self.high is not None  # a range: low and high are set (the space's model)
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)

    def grid(self) -> list[Any]:
        """The values a grid over the space uses: every choice, or a few points spread over the range."""
        if self.choices is not None:
            return list(self.choices)
        assert self.low is not None and self.high is not None  # a range: low and high are set (the space's model)
        low, high = float(self.low), float(self.high)
        if self.integer and high - low + 1 <= _GRID_POINTS:
            return list(range(int(low), int(high) + 1))
        if self.log:
            points = [low * (high / low) ** (i / (_GRID_POINTS - 1)) for i in range(_GRID_POINTS)]
        else:
            points = [low + (high - low) * i / (_GRID_POINTS - 1) for i in range(_GRID_POINTS)]
        return sorted({int(round(p)) for p in points}) if self.integer else points


def spelled(data: Mapping[Any, Any], name: str, other: Any) -> str:
    """How ``data`` spells the first key that normalises to ``name`` (other than ``other``)."""
    return next(str(k) for k in data if str(k).replace("-", "_") == name and k != other)


def search_dims(data: dict[str, Any] | None, fixed: Mapping[str, Any], fail: Fail) -> tuple[EngineArgDim, ...]:
    """``search.engine_args``: ``name: [choices]`` or ``name: {low, high, log, baseline}``."""
    out: list[EngineArgDim] = []
    for key, spec in (data or {}).items():
        name = str(key).replace("-", "_")
        field = f"search.engine_args.{key}"
        if name in fixed:
            raise fail(field, f"is also fixed in engine_args ({fixed[name]!r})",
                            f"remove engine_args.{name} or stop searching it")
        if any(d.name == name for d in out):
            raise fail(field, f"searches the same engine argument as search.engine_args."
                            f"{spelled(data or {}, name, key)} (dashes and underscores are one name)",
                            "keep one of the two")
        if isinstance(spec, list):
            if not spec:
                raise fail(field, "is an empty list", "list at least two values to choose from")
            if len(set(map(repr, spec))) != len(spec):
                raise fail(field, "lists a value twice", "list each value once")
            typed_choices(name, spec, field, fail)
            out.append(EngineArgDim(name, choices=tuple(spec), baseline=spec[0]))
            continue
        low, high = spec["low"], spec["high"]
        if high <= low:
            raise fail(f"{field}.high", f"must be above low ({high} <= {low})", "make high > low")
        log = spec.get("log", False)
        if log and low <= 0:
            raise fail(f"{field}.low", "must be above 0 on a log scale", "raise low or drop log")
        typed_choices(name, [low, high], field, fail)
        integer = isinstance(low, int) and isinstance(high, int)
        base = spec.get("baseline", low)
        if not low <= base <= high:
            raise fail(f"{field}.baseline", f"must be a number in [{low}, {high}], got {base!r}",
                            "give the value you run today, within the range")
        if integer and not isinstance(base, int):
            raise fail(f"{field}.baseline", f"must be a whole number, got {base!r}",
                            "give a whole number (low and high are whole numbers)")
        out.append(EngineArgDim(name, low=low, high=high, log=log, integer=integer, baseline=base))
    return tuple(out)

def typed_choices(name: str, values: list[Any], field: str, fail: Fail) -> None:
    """Searched values of one argument: each one the argument's type (:class:`EngineArgs`), and no list that
    mixes true/false with numbers (YAML's ``true`` is not 1)."""
    if any(isinstance(v, bool) for v in values) and any(isinstance(v, int | float) and not isinstance(v, bool)
                                                        for v in values):
        raise fail(field, f"mixes true/false with numbers ({values!r})",
                        "list values of one kind: numbers, or true and false")
    for value in values:
        problem = engine_arg_problem(name, value)
        if problem is not None:
            raise fail(field, *problem)
