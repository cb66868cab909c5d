"""The report's JSON file: versioned, with a reader, and the text report renders from it (pyperf style).

:func:`report_json` writes one document: ``format`` (:data:`REPORT_FORMAT`), then the flat view scripts read
(:meth:`Report.to_json`'s keys, whose names stay as they are), then ``record``: the whole typed :class:`Report`
as pydantic dumps it. :func:`read_report` checks the format and validates ``record`` back into a :class:`Report`,
so ``read_report(file).render()`` is the text the study printed (``autotune report --from-json``). The view alone
could not give that back: it drops what only the text uses and renames fields for scripts.

A file this autotune cannot read (a newer format, a truncated or edited file, a directory, bytes that are not
UTF-8) is one :class:`ReportFormatError` line naming the file and the field.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from autotune.core.inputs import InputFileError, parse_json, read_input
from autotune.report._report import Report

__all__ = ["REPORT_FORMAT", "ReportFormatError", "read_report", "report_from_json", "report_json"]

_NAME, _VERSION = "autotune.report", 1
#: The ``format`` of every report JSON this autotune writes. A change a reader of ``record`` would misread (a
#: field renamed, or its meaning changed) raises the number; a new field with a default does not.
REPORT_FORMAT = f"{_NAME}/{_VERSION}"
#: A report of thousands of trials is a few MiB; far over that is another file.
MAX_REPORT_BYTES = 256 * 1024 * 1024
_AGAIN = "write it again with `autotune report --study NAME --json PATH`"


class ReportFormatError(ValueError):
    """A report JSON this autotune cannot read; the message is one line naming the file and the field."""


@functools.cache
def _adapter() -> TypeAdapter[Report]:
    # Built on first use: a pydantic schema of the whole report tree takes tens of milliseconds.
    return TypeAdapter(Report)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as the strings pydantic reads back as floats: the file stays strict JSON
    (``jq`` and browsers refuse a bare ``NaN``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def report_json(report: Report) -> dict[str, Any]:
    """The versioned document ``--json`` writes (``report``, ``tune``, ``worker``) and MLflow logs as ``report.json``."""
    return {"format": REPORT_FORMAT, **report.to_json(),
            "record": _finite(_adapter().dump_python(report, mode="json"))}


def report_from_json(data: Any, where: str = "report JSON") -> Report:
    """The :class:`Report` a parsed document holds, its format checked; ``where`` names it in errors."""
    if not isinstance(data, Mapping):
        raise ReportFormatError(f"{where}: not a report: a JSON {type(data).__name__} where an object is expected")
    if "format" not in data:
        raise ReportFormatError(f"{where}: format: missing; not a report JSON, or one written before the format was "
                                f"versioned: {_AGAIN}")
    fmt = data["format"]
    name, _, number = str(fmt).partition("/")
    if name != _NAME or not number.isdigit():
        raise ReportFormatError(f"{where}: format: {fmt!r} is not an autotune report format (this autotune reads "
                                f"{REPORT_FORMAT})")
    if int(number) != _VERSION:
        newer = int(number) > _VERSION
        raise ReportFormatError(f"{where}: format: {fmt} is {'newer than' if newer else 'not'} what this autotune "
                                f"reads ({REPORT_FORMAT}): "
                                + ("read it with the autotune that wrote it, or a newer one" if newer else _AGAIN))
    if not isinstance(data.get("record"), Mapping):
        raise ReportFormatError(f"{where}: record: missing or not an object; {_AGAIN}")
    try:
        return _adapter().validate_python(data["record"])
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        field = ".".join(["record", *(str(x) for x in first["loc"])])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReportFormatError(f"{where}: {field}: {first['msg']}{more}; {_AGAIN}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        # The typed classes check themselves after pydantic (their __post_init__): still the file's fault.
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ReportFormatError(f"{where}: record: does not read back as a report ({line}); {_AGAIN}") from None


def read_report(path: str | os.PathLike[str]) -> Report:
    """The :class:`Report` stored in the JSON file at ``path`` (written by ``--json``).

    Raises:
        ReportFormatError: the file cannot be read, is not UTF-8 JSON, or is not a report of :data:`REPORT_FORMAT`.
    """
    where = os.fspath(path)
    try:
        raw = read_input(where, MAX_REPORT_BYTES)  # a FIFO or /dev/zero: one line at once, not a hang
    except InputFileError as exc:
        raise ReportFormatError(f"{where}: {exc.problem}; {exc.fix}") from None
    except IsADirectoryError:
        raise ReportFormatError(f"{where}: is a directory; give the report's JSON file, e.g. "
                                f"{os.path.join(where, 'report.json')}") from None
    except FileNotFoundError:
        raise ReportFormatError(f"{where}: no such file; give the file `report --json PATH` or `tune --json PATH` "
                                "wrote") from None
    except OSError as exc:
        raise ReportFormatError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{where}: not UTF-8 text (byte {exc.start}); not a report JSON file") from None
    try:
        data = parse_json(text)
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{where}: not valid JSON at line {exc.lineno} column {exc.colno} ({exc.msg}): "
                                f"truncated or edited? {_AGAIN}") from None
    except ValueError as exc:
        raise ReportFormatError(f"{where}: {exc}; not a report JSON file: {_AGAIN}") from None
    return report_from_json(data, where)
