"""The space's ``output_check:`` section: the agreement with the baseline's outputs a winner needs.

::

    output_check: {min_agreement: 0.9}   # the default; 0 turns the check off

The shape is validated with the rest of the file (:class:`autotune.config._models.OutputCheckSpec`); what is
compared is in :mod:`autotune.core.outputs`.
"""

from __future__ import annotations

from typing import Any

from autotune.core.outputs import DEFAULT_MIN_AGREEMENT

__all__ = ["min_agreement"]


def min_agreement(space: Any) -> float:
    """The space's threshold (``output_check.min_agreement``), else :data:`DEFAULT_MIN_AGREEMENT`."""
    section = dict(getattr(space, "raw", None) or {}).get("output_check") or {}
    value = section.get("min_agreement") if isinstance(section, dict) else None
    return DEFAULT_MIN_AGREEMENT if value is None else float(value)


def min_agreement_from_yaml(text: str | None) -> float:
    """The threshold as a stored space file sets it (``autotune report`` reads it without the file)."""
    from autotune.config._yaml import load_yaml

    try:  # the space loader's YAML reading (aliases bounded), on the stored text
        raw = load_yaml(text, lambda *problem: ValueError(*problem)) if text else None
    except ValueError:
        raw = None
    section = raw.get("output_check") if isinstance(raw, dict) else None
    value = section.get("min_agreement") if isinstance(section, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return DEFAULT_MIN_AGREEMENT
