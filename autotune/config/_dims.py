"""A searched engine argument (``search.engine_args``): its choices or range, what it suggests and its grid."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["EngineArgDim"]

#: Points a numeric engine-argument range contributes to :meth:`SearchSpace.all_params` (grids, ground truth).
_GRID_POINTS = 5


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
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)  # type: ignore[arg-type]
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)  # type: ignore[arg-type]

    def grid(self) -> list[Any]:
        """The values a grid over the space uses: every choice, or a few points spread over the range."""
        if self.choices is not None:
            return list(self.choices)
        low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
        if self.integer and high - low + 1 <= _GRID_POINTS:
            return list(range(int(low), int(high) + 1))
        if self.log:
            points = [low * (high / low) ** (i / (_GRID_POINTS - 1)) for i in range(_GRID_POINTS)]
        else:
            points = [low + (high - low) * i / (_GRID_POINTS - 1) for i in range(_GRID_POINTS)]
        return sorted({int(round(p)) for p in points}) if self.integer else points
