"""A draft-token schedule: how many draft tokens (K) vLLM runs at each batch size.

vLLM 0.26.0 takes ``speculative_config.num_speculative_tokens_per_batch_size``, a list of
``[range_start, range_end, K]`` over inclusive batch-size ranges (``vllm/config/speculative.py``; validated in
``vllm/v1/spec_decode/dynamic/utils.py``: ranges positive, sorted, non-overlapping, the first from 1; every K >= 0
and clamped to ``num_speculative_tokens``; batch sizes above the last range keep its K). autotune carries one as a
:class:`KSchedule` in :class:`~autotune.core.records.EngineConfig`'s ``speculative_config`` under
:data:`SCHEDULE_KEY`, in one canonical form (a sorted list of ``[start, end, K]`` integer lists, adjacent ranges of
one K merged), with ``num_speculative_tokens`` set to the schedule's largest K, so ``config.key()`` and labels are
stable however the schedule was written.

Pure: imports nothing else of autotune.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from autotune.core.resolved import Detail, Difference, Resolved

__all__ = ["SCHEDULE_KEY", "SCHEDULE_SINCE", "KSchedule", "canonical_spec", "coverage_problems", "schedule_of",
           "schedule_differences", "supports_schedule"]

#: vLLM's name for the schedule inside ``speculative_config``.
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
#: The first vLLM version that takes a schedule.
SCHEDULE_SINCE = (0, 26, 0)


def _version(text: Any) -> tuple[int, ...] | None:
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return None if match is None else tuple(int(p) for p in match.groups(default="0"))


def supports_schedule(engine_version: Any) -> bool | None:
    """Whether a vLLM of ``engine_version`` takes a K schedule (``None``: the version is unknown)."""
    version = _version(engine_version)
    return None if version is None else version >= SCHEDULE_SINCE


@dataclasses.dataclass(frozen=True)
class KSchedule:
    """Draft tokens by batch size: ``entries`` are ``(start, end, K)``, inclusive, ascending, contiguous from 1."""

    entries: tuple[tuple[int, int, int], ...]

    @classmethod
    def of(cls, value: Any) -> KSchedule:
        """A schedule from vLLM's list shape (or a :class:`KSchedule`), canonical: sorted, one K per merged range.

        Raises:
            ValueError: not a list of ``[start, end, K]`` whole numbers (use :func:`problems` for the rules).
        """
        if isinstance(value, KSchedule):
            return value
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError(f"a schedule is a non-empty list of [start, end, K], got {value!r}")
        rows = []
        for entry in value:
            if (not isinstance(entry, (list, tuple)) or len(entry) != 3
                    or any(isinstance(x, bool) or not isinstance(x, int) for x in entry)):
                raise ValueError(f"a schedule entry is [start, end, K] in whole numbers, got {entry!r}")
            rows.append((int(entry[0]), int(entry[1]), int(entry[2])))
        rows.sort()
        merged: list[tuple[int, int, int]] = []
        for start, end, k in rows:
            if merged and merged[-1][2] == k and merged[-1][1] + 1 == start:
                merged[-1] = (merged[-1][0], end, k)
            else:
                merged.append((start, end, k))
        return cls(tuple(merged))

    @classmethod
    def from_levels(cls, levels: Sequence[int], ks: Sequence[int]) -> KSchedule:
        """The schedule that runs ``ks[i]`` up to load level ``levels[i]`` (from the level before it, plus one)."""
        entries, start = [], 1
        for level, k in zip(levels, ks):
            entries.append([start, int(level), int(k)])
            start = int(level) + 1
        return cls.of(entries)

    @property
    def max_k(self) -> int:
        return max(k for _, _, k in self.entries)

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(k for _, _, k in self.entries)

    def k_at(self, batch: int) -> int:
        """K at ``batch`` running sequences (above the last range: its K, as vLLM does)."""
        for start, end, k in self.entries:
            if start <= batch <= end:
                return k
        return self.entries[-1][2] if batch > self.entries[-1][1] else self.entries[0][2]

    def to_list(self) -> list[list[int]]:
        """vLLM's shape: ``[[1, 8, 4], [9, 32, 2], [33, 128, 1]]``."""
        return [[s, e, k] for s, e, k in self.entries]

    def text(self) -> str:
        """``4|2|1 @ 1-8|9-32|33-128``: what a label shows after ``K=``."""
        return (f"{'|'.join(str(k) for k in self.ks)} @ "
                f"{'|'.join(f'{s}-{e}' for s, e, _ in self.entries)}")

    @staticmethod
    def problems(value: Any, highest_level: int, k_max: int) -> list[tuple[str, str, str]]:
        """What is wrong with ``value`` as a schedule, one ``(where, problem, fix)`` per fault (empty: none).

        ``where`` is ``""`` for the schedule as a whole or ``[i]`` for entry ``i``. The rules: entries are
        ``[start, end, K]`` whole numbers with ``start <= end``; ranges ascending and contiguous from 1; the last
        range reaching ``highest_level`` (the highest load level the study measures); each K from 0 to ``k_max``
        (the draft's allowed range) and at least one K above 0.
        """
        if not isinstance(value, list) or not value:
            return [("", f"must be a non-empty list of [start, end, K], got {value!r}",
                     "write e.g. [[1, 8, 4], [9, 32, 2], [33, 128, 1]]")]
        out: list[tuple[str, str, str]] = []
        expected = 1
        for i, entry in enumerate(value):
            where = f"[{i}]"
            if (not isinstance(entry, list) or len(entry) != 3
                    or any(isinstance(x, bool) or not isinstance(x, int) for x in entry)):
                out.append((where, f"must be [start, end, K] in whole numbers, got {entry!r}",
                            "write e.g. [9, 32, 2]"))
                return out
            start, end, k = entry
            if start > end:
                out.append((where, f"range {start}-{end} ends before it starts", f"make the end >= {start}"))
            if start != expected:
                if i == 0:
                    out.append((where, f"the first range starts at {start}, not at 1 (every batch size needs a K)",
                                f"start it at 1: [1, {end}, {k}]"))
                elif start < expected:
                    out.append((where, f"range {start}-{end} is not ascending: it overlaps the one before "
                                f"(which ends at {expected - 1})", f"start it at {expected}"))
                else:
                    out.append((where, f"range {start}-{end} leaves a gap: batch sizes {expected}-{start - 1} have "
                                "no K", f"start it at {expected}"))
            if not 0 <= k <= k_max:
                out.append((where, f"K={k} is outside the draft's allowed range 0-{k_max}",
                            f"use a K from 0 to {k_max}"))
            expected = max(expected, end + 1)
        if not out and value[-1][1] < highest_level:
            out.append((f"[{len(value) - 1}]", f"the last range ends at {value[-1][1]}, below the highest load level "
                        f"{highest_level}", f"end it at {highest_level} or above"))
        if not out and all(e[2] == 0 for e in value):
            out.append(("", "every K is 0 (speculation off at every batch size)", "give some range a K above 0"))
        return out


def schedule_of(spec: Any) -> KSchedule | None:
    """The K schedule of a ``speculative_config`` (``None``: one K, or a schedule too malformed to read)."""
    try:
        return None if not spec or spec.get(SCHEDULE_KEY) is None else KSchedule.of(spec[SCHEDULE_KEY])
    except ValueError:
        return None


def canonical_spec(spec: Any) -> Any:
    """``spec`` (a ``speculative_config``) with its K schedule in the canonical form; unchanged without one, or when
    the schedule is malformed (the engine then refuses it with its own reason)."""
    if not spec or SCHEDULE_KEY not in spec:
        return spec
    try:
        rows = KSchedule.of(spec[SCHEDULE_KEY]).to_list()
    except ValueError:
        return spec
    return spec if rows == spec[SCHEDULE_KEY] else {**spec, SCHEDULE_KEY: rows}


def coverage_problems(schedule: KSchedule, sizes: Sequence[int] | None, max_num_seqs: int | None) -> list[str]:
    """Where the captured sizes do not hold a range's verification batch (sequences x (1+K)), one line each.

    A range's largest batch is its end, capped by ``max_num_seqs``; a batch of more tokens than the largest
    captured size runs without graphs. Empty when every range is covered, or the sizes are unknown or empty.
    """
    if not sizes:
        return []
    largest = max(int(s) for s in sizes)
    out = []
    for start, end, k in schedule.entries:
        if max_num_seqs is not None and start > max_num_seqs:
            break
        seqs = end if max_num_seqs is None else min(end, int(max_num_seqs))
        tokens = seqs * (1 + k)
        if tokens > largest:
            out.append(f"range {start}-{end} K={k}: verification batches of up to {seqs} x {1 + k} = {tokens} "
                       f"tokens exceed the largest captured size {largest} (they run without graphs)")
    return out


#: vLLM's default capture mode (since 0.11), what a schedule left on the default mode asks for.
_DEFAULT_MODE = "FULL_AND_PIECEWISE"


def schedule_differences(schedule: KSchedule | None, configured_mode: str | None,
                         resolved: Resolved | None) -> list[Difference]:
    """What the engine changed about a configured K schedule, as ``resolved != configured`` differences.

    * the schedule the engine read back differs from the configured one, or is absent (ignored: it runs one K);
      an engine that does not report a schedule at all (no :attr:`Detail.SPEC_SCHEDULE` key) says nothing here;
    * a schedule left on the default capture mode that resolved without full graphs (dynamic K on a runner or
      attention backend that cannot capture it: FULL_AND_PIECEWISE -> PIECEWISE). A configured mode that changed is
      already a ``cudagraph_mode`` difference (:func:`autotune.core.records.config_differences`).
    """
    if schedule is None or resolved is None:
        return []
    out = []
    details = resolved.details
    if SCHEDULE_KEY in details or Detail.SPEC_SCHEDULE in details:
        got = details.get(Detail.SPEC_SCHEDULE)
        try:
            got_schedule = None if not got else KSchedule.of(got)
        except ValueError:
            got_schedule = None
        if got_schedule is None:
            out.append(Difference(SCHEDULE_KEY, schedule.text(), f"ignored (got {got!r}: one K for every batch)"))
        elif got_schedule != schedule:
            out.append(Difference(SCHEDULE_KEY, schedule.text(), got_schedule.text()))
    got_mode = None if resolved.cudagraph_mode is None else str(resolved.cudagraph_mode).rsplit(".", 1)[-1].upper()
    if configured_mode is None and got_mode in ("PIECEWISE", "NONE"):
        out.append(Difference("cudagraph_mode", f"default ({_DEFAULT_MODE}) with a K schedule", got_mode))
    return out
