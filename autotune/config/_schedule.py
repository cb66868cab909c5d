"""``search.num_speculative_tokens`` as a K schedule (K by batch size): the space's rules for it.

A schedule is searched when the space names some (``schedules: {taper: [[1, 8, 4], [9, 32, 2], [33, 128, 1]]}``:
the Optuna parameter ``k_schedule`` chooses ``fixed`` or one of them), and derived when the study has load levels
(``schedule: derive``, the default then): the verification takes in a schedule of the levels' best K
(:mod:`autotune.decisions.schedule`), whose ``k_schedule`` parameter is the schedule itself, so the configuration is
rebuilt from its parameters like any other.
"""

from __future__ import annotations

import contextlib

from collections.abc import Callable, Sequence
from typing import Any

from autotune.config._models import KRange
from autotune.core.params import K_SCHEDULE
from autotune.core.schedule import KSchedule

__all__ = ["FIXED", "SCHEDULE_PARAM", "derive_enabled", "parse_schedules", "schedule_problem"]

#: The Optuna parameter that chooses a schedule (a name, or a derived schedule's list); ``fixed``: one K.
SCHEDULE_PARAM = K_SCHEDULE
FIXED = "fixed"
_FIELD = "search.num_speculative_tokens"


def k_limit(drafts: Sequence[Any], hard_max: int) -> int:
    """The largest K some draft allows (its ``max_k``, else ``hard_max``)."""
    return max([min(hard_max, d.max_k or hard_max) for d in drafts] or [hard_max])


def parse_schedules(data: KRange, fail: Callable[[str, str, str], Exception], highest_level: int,
                    drafts: Sequence[Any], hard_max: int) -> tuple[tuple[str, KSchedule], ...]:
    """``search.num_speculative_tokens.schedules``, each checked (:meth:`KSchedule.problems`): the first fault of
    the first bad schedule is a one-line error naming the entry, e.g. ``...schedules.taper[1]``."""
    out = []
    limit = k_limit(drafts, hard_max)
    for name, value in (data.schedules or {}).items():
        field = f"{_FIELD}.schedules.{name}"
        if str(name) == FIXED:
            raise fail(field, f"'{FIXED}' is reserved for one K at every batch size", "give the schedule another name")
        if not drafts:
            raise fail(field, "a schedule needs a draft", "declare at least one draft under search.drafts")
        problems = KSchedule.problems(value, highest_level, limit)
        if problems:
            where, problem, fix = problems[0]
            raise fail(field + where, problem, fix)
        out.append((str(name), KSchedule.of(value)))
    return tuple(out)


def derive_enabled(data: KRange, levels: Sequence[int], k_high: int,
                   fail: Callable[[str, str, str], Exception]) -> bool:
    """Whether the study derives a schedule: ``schedule: derive``, the default with several load levels and K > 0."""
    setting = data.schedule
    if setting == "derive" and (len(levels) < 2 or k_high < 1):
        raise fail(f"{_FIELD}.schedule", "a schedule is derived from the best K at each load level, but the study has "
                   f"{'one load level' if len(levels) < 2 else 'no K above 0'}",
                   "list load levels (workload.concurrency: [8, 32, 128]) and a K range above 0, or drop schedule:")
    return setting != "off" and len(levels) > 1 and k_high > 0


def schedule_problem(value: Any, highest_level: int, limit: int) -> str | None:
    """Why a ``k_schedule`` parameter's list is not a usable schedule (``None``: it is); its rows in any order."""
    # Rows of mixed shapes cannot be sorted: they stay as given and the rules below name the bad one.
    with contextlib.suppress(TypeError):
        value = sorted(value) if isinstance(value, list) else value
    problems = KSchedule.problems(value, highest_level, limit)
    if not problems:
        return None
    where, problem, _ = problems[0]
    return f"k_schedule{where}: {problem}"
