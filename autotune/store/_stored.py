"""Reading a stored value back: each key through its parser, and a value autotune never writes is one line.

A store is input like any other (issue 32): an attribute edited by hand, written by another program or damaged
(``autotune:restarts`` holding a string, a configuration holding a list) must not be a traceback in ``report``,
``export`` or a resume. :func:`decoded` turns whatever the parser raises into a
:class:`~autotune.store._storage.LedgerError` naming the study, the trial and the key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from autotune.store._storage import LedgerError

__all__ = ["decoded", "flag", "list_of", "mapping", "mapping_of", "text", "whole"]

Parse = Callable[[Any], Any]


def decoded(value: Any, parse: Parse, key: str, study: str, trial: int | None) -> Any:
    """``parse(value)``; a value it cannot read is a :class:`LedgerError` naming ``key`` and the trial."""
    try:
        return parse(value)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        where = "the study" if trial is None else f"trial {trial}"
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        why = str(exc).splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise LedgerError(f"study {study!r}, {where}: the stored {key} is not what autotune writes ({shown}: {why}); "
                          "the store was edited or damaged: restore it from a copy, or start a new study with "
                          "another --study") from None


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a text, got {type(value).__name__}")
    return value


def flag(value: Any) -> bool:
    # Only a real boolean: "false" or 0 read as truthy would say a search closed, or a trial interrupted, that never was.
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {type(value).__name__}")
    return value


def mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping, got {type(value).__name__}")
    return dict(value)


def list_of(parse: Parse) -> Parse:
    def read(value: Any) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return [parse(item) for item in value]
    return read


def mapping_of(parse: Parse) -> Parse:
    def read(value: Any) -> dict[str, Any]:
        return {str(k): parse(v) for k, v in mapping(value).items()}
    return read
