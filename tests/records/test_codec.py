"""The record layer's generic writer and reader, on records of its own (the stored records: test_stored.py)."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from autotune.records import RecordError, decode, encode, reader, record


class Kind(enum.Enum):
    GUARD = "guard"


@dataclasses.dataclass(frozen=True)
class Level:
    concurrency: int
    passes: tuple[float, ...] = ()


@record(omit_at_default=("score", "levels", "kind"), emits=("n",))
@dataclasses.dataclass(frozen=True)
class Run:
    status: str
    mean: float
    passes: tuple[float, ...] = ()
    levels: tuple[Level, ...] = ()
    score: float | None = None
    kind: Kind | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.passes)


@dataclasses.dataclass(frozen=True)
class Renamed:
    limit_ms: float
    note: str = ""


@reader(Renamed)
def _any_version(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "note": str(data.get("note") or "")}


@reader(Renamed, version=1)
def _version_1(data: dict[str, Any]) -> dict[str, Any]:
    # Version 1 stored the limit in seconds under another name.
    return {**{k: v for k, v in data.items() if k != "limit_s"}, "limit_ms": float(data["limit_s"]) * 1000.0}


def test_a_record_is_written_in_field_order_with_its_emitted_figures_after_and_defaults_left_out() -> None:
    run = Run("ok", 2.5, passes=(1.0, 2.0))
    assert list(encode(run)) == ["status", "mean", "passes", "details", "n"]
    assert encode(run) == {"status": "ok", "mean": 2.5, "passes": [1.0, 2.0], "details": {}, "n": 2}


def test_a_field_off_its_default_is_written_with_nested_records_enums_and_tuples_as_json() -> None:
    run = Run("ok", 1.0, levels=(Level(4, (3.0,)),), score=0.0, kind=Kind.GUARD, details={"sizes": (1, 2)})
    out = encode(run)
    assert out["levels"] == [{"concurrency": 4, "passes": [3.0]}]
    assert out["score"] == 0.0 and out["kind"] == "guard" and out["details"] == {"sizes": [1, 2]}
    assert json.loads(json.dumps(out)) == out


def test_nan_is_written_as_null_and_a_null_float_reads_back_as_nan() -> None:
    out = encode(Run("failed", math.nan))
    assert out["mean"] is None
    assert math.isnan(decode(Run, out).mean)


def test_a_record_reads_back_equal_and_its_emitted_figures_and_unknown_keys_are_ignored() -> None:
    run = Run("ok", 1.0, passes=(1.0, 2.0), levels=(Level(4, (3.0,)),), score=2.0, kind=Kind.GUARD)
    assert decode(Run, {**encode(run), "added_by_a_newer_autotune": 1}) == run


def test_a_null_where_the_field_takes_none_reads_as_the_default() -> None:
    assert decode(Run, {"status": "ok", "mean": 1.0, "passes": None, "details": None}) == Run("ok", 1.0)


def test_readers_run_by_version_the_any_version_reader_always() -> None:
    assert decode(Renamed, {"limit_s": 0.05, "note": None}, version=1) == Renamed(50.0, "")
    assert decode(Renamed, {"limit_ms": 50.0}, version=2) == Renamed(50.0, "")


def test_a_record_that_does_not_fit_is_one_line_naming_the_type_and_the_field() -> None:
    with pytest.raises(RecordError, match=r"^Run: mean: .*number"):
        decode(Run, {"status": "ok", "mean": "fast"})
    with pytest.raises(RecordError, match=r"^Run: status: "):
        decode(Run, {"mean": 1.0})
    with pytest.raises(RecordError, match=r"^Run: a JSON list where an object is expected"):
        decode(Run, [1, 2])


def test_declaring_a_field_the_record_lacks_is_refused() -> None:
    with pytest.raises(TypeError, match="no field 'scroe'"):
        record(omit_at_default=("scroe",))(Run)


def test_the_writer_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError, match="cannot write a object"):
        encode(object())


@record(pairs=("limits",))
@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Renamed
    many: tuple[Renamed, ...] = ()
    limits: tuple[tuple[str, float], ...] = ()


def test_a_nested_record_is_read_by_its_own_readers_and_pairs_are_one_object() -> None:
    outer = decode(Outer, {"inner": {"limit_ms": 5.0, "note": None}, "many": [{"limit_ms": 1}],
                           "limits": {"tpot": 2.0, "e2el": 1.0}})
    assert outer == Outer(Renamed(5.0, ""), (Renamed(1.0, ""),), (("e2el", 1.0), ("tpot", 2.0)))
    assert encode(outer)["limits"] == {"e2el": 1.0, "tpot": 2.0}
