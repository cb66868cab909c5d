"""Bounds on what a restart's record may hold (issue 32, principle 6: stored records are bounded in size).

An engine's log tail, its error line and the start-up facts it reports come from the engine, not from autotune:
a runaway warning loop or a traceback with a megabyte of tensor repr would otherwise be stored whole in every
record that carries them (the Optuna store, claims, MLflow, the report's JSON). The record keeps a bounded
excerpt; the whole text stays in the engine's log file beside the study (``RestartResult.log_path``), which the
cut says.

The sizes are choices, not measurements: a log tail of 8,000 characters holds the ~40 lines of a Python traceback
with room to spare; a resolved detail or note of 2,000 characters holds any vLLM start-up line seen on the H200.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The most characters kept of an engine's log tail (its last ones: the end of a log says why it stopped).
LOG_TAIL_CHARS = 8_000
#: The most characters kept of an error line (its first ones: the reason comes first).
ERROR_CHARS = 2_000
#: The most characters kept of any one text in the resolved facts (a note, a detail's string).
TEXT_CHARS = 2_000
#: The most items kept of any one list or mapping in the resolved facts (capture sizes are not cut: at most a few
#: hundred in any engine, and they are what the audit compares).
ITEMS = 64
#: How deep nested details are kept.
DEPTH = 6
#: The most characters (about) that the resolved facts' details, or their notes, hold in all: past it, what is
#: left is cut with a count (a start-up log seen on the H200 gave details of about 1,000 characters).
TOTAL_CHARS = 32_000


def bound_text(text: str | None, limit: int, *, keep_end: bool = False, whole: str | None = None) -> str | None:
    """``text`` cut to ``limit`` characters with a marker saying how much was cut and where the whole is."""
    if text is None or len(text) <= limit:
        return text
    where = f"; the whole log: {whole}" if whole else ""
    # The marker counts against the limit, so a cut text is within it and cutting again changes nothing.
    marker = f"[... {len(text) - limit} characters cut{where}]"
    room = max(limit - len(marker) - 1, 0)
    return f"{marker}\n{text[len(text) - room:]}" if keep_end else f"{text[:room]} {marker}"


class _Budget:
    def __init__(self, chars: int) -> None:
        self.left = chars

    def spend(self, n: int) -> bool:
        self.left -= n
        return self.left >= 0


def _fits(value: Any, budget: _Budget, depth: int = 0) -> bool:
    """Whether ``value`` is within the bounds already (what :func:`bound_value` made is: a record read back from
    the store is not cut again)."""
    if isinstance(value, str):
        return len(value) <= TEXT_CHARS and budget.spend(len(value))
    if isinstance(value, (Mapping, list, tuple)):
        if depth >= DEPTH or len(value) > ITEMS + 1:
            return False
        if isinstance(value, Mapping):
            return all(budget.spend(len(str(k)) + 4) and _fits(v, budget, depth + 1) for k, v in value.items())
        return all(budget.spend(2) and _fits(v, budget, depth + 1) for v in value)
    return budget.spend(8)


def bound_value(value: Any, budget: _Budget | None = None, depth: int = 0) -> Any:
    """A JSON-like value with every string, list and mapping bounded (``TEXT_CHARS``, ``ITEMS``, ``DEPTH``) and
    the whole within about ``TOTAL_CHARS``."""
    if budget is None:
        # Markers may take the cut value a little past TOTAL_CHARS: what fits twice the total is left as it is.
        if _fits(value, _Budget(2 * TOTAL_CHARS)):
            return value
        budget = _Budget(TOTAL_CHARS)
    if isinstance(value, str):
        text = bound_text(value, min(TEXT_CHARS, max(budget.left, 0)) if budget.left < TEXT_CHARS else TEXT_CHARS)
        budget.spend(len(text or ""))
        return text
    if depth >= DEPTH and isinstance(value, (Mapping, list, tuple)):
        return bound_value(repr(value), budget, depth)
    if isinstance(value, Mapping):
        items, out = list(value.items()), {}
        for i, (k, v) in enumerate(items):
            if i >= ITEMS or not budget.spend(len(str(k)) + 4):
                out["..."] = f"{len(items) - i} more entries cut"
                break
            out[str(k)[:TEXT_CHARS]] = bound_value(v, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        kept: list[Any] = []
        for i, v in enumerate(value):
            if i >= ITEMS or not budget.spend(2):
                kept.append(f"... {len(value) - i} more items cut")
                break
            kept.append(bound_value(v, budget, depth + 1))
        return kept if isinstance(value, list) else tuple(kept)
    budget.spend(8)
    return value


def bound_texts(texts: Any) -> tuple[str, ...]:
    """Notes: each within ``TEXT_CHARS``, at most ``ITEMS`` of them, about ``TOTAL_CHARS`` in all."""
    texts = tuple(texts or ())
    if len(texts) <= ITEMS + 1 and all(isinstance(t, str) and len(t) <= TEXT_CHARS for t in texts) \
            and sum(map(len, texts)) <= TOTAL_CHARS + 64:
        return texts  # within the bounds already (read back from the store): not cut again
    budget, out = _Budget(TOTAL_CHARS), []
    for i, text in enumerate(texts):
        if i >= ITEMS or budget.left <= 0:
            out.append(f"... {len(texts) - i} more notes cut")
            break
        kept = bound_text(str(text), min(TEXT_CHARS, budget.left)) or ""
        budget.spend(len(kept))
        out.append(kept)
    return tuple(out)
