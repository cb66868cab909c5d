"""One generic writer and reader over the frozen dataclass records, with each record's stored shape declared once.

The rules every record shares (so no record writes them again):

- A float that is NaN (or infinite) is written as ``null``, and ``null`` reads back as NaN in a field typed
  ``float`` (a record whose null means infinity says so in its reader): the stored and emitted JSON stays strict.
- Tuples are written as lists, sets as sorted lists, enums as their values, mappings as objects, nested records by
  their own shape.
- A stored ``null`` in a field that does not take ``None`` reads as the field's default: older autotune wrote some
  empty collections as ``null``.
- Keys the type does not know are ignored when reading: what a record emits beside its fields (``emits``), and what
  a newer autotune added.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from pydantic import TypeAdapter

__all__ = ["RecordError", "decode", "decoder", "encode", "reader", "record"]

T = TypeVar("T")
#: A JSON value as :func:`encode` returns it.
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
#: A reader of one stored shape: the stored mapping in, the mapping of the current shape out.
Reader = Callable[[dict[str, Any]], dict[str, Any]]


class RecordError(ValueError):
    """A stored record that does not fit its type; the message is one line naming the type and the field."""


@dataclasses.dataclass(frozen=True)
class _Shape:
    """How one record type's stored shape differs from its fields (written once, by :func:`record`)."""

    omit_at_default: frozenset[str] = frozenset()
    emits: tuple[tuple[str, str], ...] = ()  # (key, attribute)
    renamed: Mapping[str, str] = dataclasses.field(default_factory=dict)  # field -> stored key
    spread: str | None = None
    pairs: frozenset[str] = frozenset()
    after: Mapping[str, str | None] = dataclasses.field(default_factory=dict)  # key -> the key it follows
    leaves_out: frozenset[str] = frozenset()


_SHAPES: dict[type, _Shape] = {}
#: Readers by type, ``(version, reader)``: those of every version (``None``) first, then oldest version first.
_READERS: dict[type, list[tuple[int | None, Reader]]] = {}


def record(*, omit_at_default: Iterable[str] = (), emits: Iterable[str] | Mapping[str, str] = (),
           renamed: Mapping[str, str] | None = None, spread: str | None = None,
           pairs: Iterable[str] = (), after: Mapping[str, str | None] | None = None,
           leaves_out: Iterable[str] = ()) -> Callable[[type[T]], type[T]]:
    """Declare a dataclass record's stored shape.

    Args:
        omit_at_default: Fields left out of the JSON while at their default: fields added after records were
            first stored, so that an older record's shape (and the digests taken of it) stays what it was. An
            emitted key named here is left out while ``None`` or false (a flag written only when raised).
        emits: Properties (or methods of no argument) written after the fields, for readers of the JSON (a count,
            a verdict's sentence); never read back, since they follow from the fields. A mapping writes each
            attribute under another key (``{"text": "describe"}``); an attribute may be a dotted path
            (``"candidate.config.label"``).
        renamed: Fields stored under another key (``{"name": "engine"}``), read back from it.
        spread: A mapping field whose items are stored beside the fields (a record's open-ended extras); on
            reading, every key the record does not know goes back into it. A nested record's field is spread
            the same way (its keys written in its place), for writing only.
        pairs: Fields of ``(key, value)`` pairs (kept as pairs so the record stays hashable) stored as one JSON
            object, and read back as the pairs sorted by key.
        after: Where an emitted key goes when not last: ``{"verdict": "max_restarts"}`` writes ``verdict`` right
            after ``max_restarts``, where the record has always had it (any key may be placed so; the places are
            taken in the order given, and one whose key or anchor is left out is skipped); ``None`` puts it first.
        leaves_out: Fields never written: a view that states them elsewhere (they read back as their default).
    """

    def declare(cls: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} is not a dataclass: the record layer writes dataclass records")
        names = {f.name for f in dataclasses.fields(cls)}
        omitted, paired, hidden = frozenset(omit_at_default), frozenset(pairs), frozenset(leaves_out)
        emitted = tuple(emits.items()) if isinstance(emits, Mapping) else tuple((name, name) for name in emits)
        unknown = (omitted - {key for key, _ in emitted} | paired | hidden | set(renamed or {})
                   | ({spread} if spread else set())) - names
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r} to declare")
        _SHAPES[cls] = _Shape(omitted, emitted, dict(renamed or {}), spread, paired, dict(after or {}), hidden)
        return cls

    return declare


def reader(cls: type, version: int | None = None) -> Callable[[Reader], Reader]:
    """Register a reader of ``cls``'s stored shape: it turns what was stored into the current shape.

    ``version`` ``None`` reads every stored version (a tolerance every stored record needs); a number ``n`` turns a
    record stored at version ``n`` or before into the shape of ``n + 1`` (applied only when :func:`decode` is told
    the stored version), so a shape changed incompatibly keeps a reader for the old one.
    """

    def register(fn: Reader) -> Reader:
        _READERS.setdefault(cls, []).append((version, fn))
        _READERS[cls].sort(key=lambda item: -1 if item[0] is None else item[0])
        return fn

    return register


# -- writing ---------------------------------------------------------------------------------------------------------
@overload
def encode(obj: DataclassInstance) -> dict[str, JsonValue]: ...
@overload
def encode(obj: object) -> JsonValue: ...
def encode(obj: object) -> JsonValue:
    """``obj`` as the JSON value it is stored or emitted as (see the module's rules): a record as a JSON object."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, enum.Enum):
        return encode(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _encode_record(obj)
    if isinstance(obj, Mapping):
        return {str(k): encode(v) for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return [encode(v) for v in sorted(obj)]  # a set has no order of its own: the JSON's is sorted
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    raise TypeError(f"the record layer cannot write a {type(obj).__name__}")


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _encode_record(obj: Any) -> dict[str, JsonValue]:
    shape = _SHAPES.get(type(obj), _Shape())
    out: dict[str, JsonValue] = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if field.name in shape.leaves_out or (field.name in shape.omit_at_default
                                              and _at_default(value, _default(field))):
            continue
        if field.name == shape.spread:
            items: Mapping[str, Any] = _encode_record(value) if dataclasses.is_dataclass(value) else value
            out.update({str(k): encode(v) for k, v in items.items() if str(k) not in out})
        elif field.name in shape.pairs:
            out[shape.renamed.get(field.name, field.name)] = {str(k): encode(v) for k, v in value}
        else:
            out[shape.renamed.get(field.name, field.name)] = encode(value)
    for key, path in shape.emits:
        value = obj
        for name in path.split("."):
            value = getattr(value, name)
        value = value() if callable(value) else value
        if key in shape.omit_at_default and not value:
            continue
        out[key] = encode(value)
    for key, anchor in shape.after.items():
        if key not in out or (anchor is not None and anchor not in out):
            continue  # a key left out at its default, or placed after one that is
        keys = [k for k in out if k != key]
        keys.insert(0 if anchor is None else keys.index(anchor) + 1, key)
        out = {k: out[k] for k in keys}
    return out


def _at_default(value: Any, default: Any) -> bool:
    if default is dataclasses.MISSING:
        return False
    if isinstance(default, (Mapping, tuple, list)) and not default:
        return not value  # an empty mapping or sequence, whatever its type
    return bool(value == default)


# -- reading ---------------------------------------------------------------------------------------------------------
def decode(cls: type[T], data: object, version: int | None = None) -> T:
    """The ``cls`` record ``data`` holds: its readers first (those of every version, then, when ``version`` is
    given, those of the versions from ``version`` on: a record stored at version 1 passes the readers of 1, 2, ...),
    then the module's rules, then pydantic's validation of the fields (a nested record read by this same function).

    Raises:
        RecordError: ``data`` does not fit ``cls``, in one line naming the type and the field.
    """
    if not isinstance(data, Mapping):
        raise RecordError(f"{cls.__name__}: a JSON {type(data).__name__} where an object is expected")
    fields = _fields(cls)
    shape = _SHAPES.get(cls, _Shape())
    shaped = dict(data)
    for reader_version, read in _READERS.get(cls, ()):
        if reader_version is None or (version is not None and version <= reader_version):
            shaped = read(shaped)
    stored_as = {key: name for name, key in shape.renamed.items()}
    kwargs: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for key, value in shaped.items():
        name = stored_as.get(key, key if key not in shape.renamed else "")
        field = fields.get(name)
        if field is None or name == shape.spread:
            spread[key] = value
            continue
        if name in shape.pairs and isinstance(value, Mapping):
            value = tuple(sorted(value.items()))
        if value is None and not field.takes_none:
            if field.is_float:
                kwargs[name] = math.nan
            elif not field.has_default:
                kwargs[name] = value  # pydantic names the field
            continue
        kwargs[name] = value if field.nested is None else _read_nested(field.nested, value)
    if shape.spread is not None:
        kwargs[shape.spread] = spread
    # pydantic loads on the first read: the engines and the simulator import the records without paying for it.
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_python(kwargs)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "(record)"
        raise RecordError(f"{cls.__name__}: {where}: {error['msg']}") from None


def decoder(cls: type[T], version: int | None = None) -> Callable[[object], T]:
    """:func:`decode` of ``cls`` as a function of the stored value: the parser a stored key is read with."""

    def read(data: object) -> T:
        return decode(cls, data, version)

    return read


@dataclasses.dataclass(frozen=True)
class _Field:
    takes_none: bool
    is_float: bool
    has_default: bool
    #: A record nested in the field, read by :func:`decode` (its readers and the rules) before pydantic sees it:
    #: ``(type, how)``, how one of ``one``, ``tuple`` (a tuple of them) or ``map`` (a mapping to them).
    nested: tuple[type, str] | None = None


def _nested(hint: Any) -> tuple[type, str] | None:
    args = [a for a in typing.get_args(hint) if a is not type(None)] if _is_union(hint) else [hint]
    if len(args) != 1:
        return None
    inner, origin = args[0], typing.get_origin(args[0])
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        return inner, "one"
    parts = typing.get_args(inner)
    if origin is tuple and len(parts) == 2 and parts[1] is Ellipsis and isinstance(parts[0], type) \
            and dataclasses.is_dataclass(parts[0]):
        return parts[0], "tuple"
    if origin in (dict, Mapping) and len(parts) == 2 and isinstance(parts[1], type) \
            and dataclasses.is_dataclass(parts[1]):
        return parts[1], "map"
    return None


def _is_union(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union


def _read_nested(nested: tuple[type, str], value: Any) -> Any:
    cls, how = nested
    if how == "one":
        return decode(cls, value) if isinstance(value, Mapping) else value
    if how == "tuple" and isinstance(value, (list, tuple)):
        return tuple(decode(cls, v) if isinstance(v, Mapping) else v for v in value)
    if how == "map" and isinstance(value, Mapping):
        return {k: decode(cls, v) if isinstance(v, Mapping) else v for k, v in value.items()}
    return value


_FIELDS: dict[type, dict[str, _Field]] = {}


def _fields(cls: type) -> dict[str, _Field]:
    if cls in _FIELDS:
        return _FIELDS[cls]
    hints = typing.get_type_hints(cls)
    out = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        args = typing.get_args(hint) if _is_union(hint) else (hint,)
        out[field.name] = _Field(takes_none=type(None) in args or hint is Any, is_float=hint is float,
                                 has_default=_default(field) is not dataclasses.MISSING, nested=_nested(hint))
    _FIELDS[cls] = out
    return out


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    # One schema a type, built on first use (a nested record's schema takes milliseconds).
    from pydantic import TypeAdapter

    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    adapter: TypeAdapter[T] = _ADAPTERS[cls]
    return adapter
