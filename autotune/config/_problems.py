"""A space file's validation error as one line: the field's path, the problem and the fix (``first_problem``).

pydantic reports every error of a union's branches with its own wording; the loader shows one, in the project's
words (``FILE: field.path: problem; fix: ...``): the branch the file meant, the hint a field's type alone does
not give (:data:`_HINTS`), else a generic sentence from the error class and the field's bounds. The shape itself
is :mod:`autotune.config._models`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune.config._models import CUDAGRAPH_MODES, MAX_CAPTURE_SIZE, SizePattern, SpaceFile, members
from autotune.core.records import LATENCY_METRICS, LATENCY_PERCENTILES, Workload, latency_key

__all__ = ["first_problem"]

_MODES = ", ".join(CUDAGRAPH_MODES)
_WEIGHTS_FIX = "give every load level a positive weight, or drop the level"
_CAPTURE_SIZE_HINT = ("capture size {v!r} is above " + str(MAX_CAPTURE_SIZE), f"use sizes up to {MAX_CAPTURE_SIZE} "
                      "(vLLM captures no batch above max_num_batched_tokens)")

#: What to say where a field's type or bounds alone do not tell the user what to write. Keys: a field pattern
#: (``*`` one key, ``[]`` a list index); values by error class (``type``: the wrong kind of value, ``value``: out
#: of bounds or not a listed choice, ``key``: a mapping key not allowed, ``missing``), each ``(problem, fix)``
#: with ``{v!r}`` for the value, plus ``field``: where to report (a list's field rather than its item).
_HINTS: dict[str, dict[str, Any]] = {
    "objective": {"value": ("unknown objective {v!r}", "use one of: throughput, goodput")},
    "slo": {"type": ("must be a non-empty mapping of limits",
                     "write e.g. slo: {{tpot_p99_ms: 50, ttft_p99_ms: 500}}")},
    "slo.*": {"value": ("must be above 0 ms", "give a positive number of milliseconds"),
              "type": ("must be a number, got {v!r}", "write a positive number of milliseconds"),
              "finite": ("must be a finite number, got {v!r}", "write a positive number of milliseconds"),
              "key": ("unknown latency limit", None)},
    "output_check.min_agreement": {"value": ("must be a fraction from 0 to 1, got {v!r}",
                                             "write e.g. min_agreement: 0.9 (0 turns the check off)"),
                                   "type": ("must be a number, got {v!r}",
                                            "write e.g. min_agreement: 0.9 (0 turns the check off)"),
                                   "finite": ("must be a finite number, got {v!r}",
                                              "write e.g. min_agreement: 0.9 (0 turns the check off)")},
    "workload.aggregate": {"value": ("unknown aggregate {v!r}",
                                     "use min (the worst level's value) or mean (optionally with weights:)")},
    "workload.concurrency": {"type": ("must be an integer, got {v!r}", "write a whole number >= 1")},
    "workload.concurrency[]": {"field": "workload.concurrency",
                               "value": ("load level {v!r} is not a whole number >= 1",
                                         "write e.g. concurrency: [1, 8, 32]"),
                               "type": ("load level {v!r} is not a whole number >= 1",
                                        "write e.g. concurrency: [1, 8, 32]")},
    "workload.dataset": {"type": ("must be a path, 'synthetic' or a mapping, got {v!r}",
                                  "write e.g. dataset: prompts.jsonl or dataset: {{vllm: spec_bench, path: "
                                  "question.jsonl}}")},
    "workload.dataset.format": {"value": ("unknown format {v!r}", "use jsonl, sharegpt or synthetic, or name a "
                                                                  "vLLM dataset with vllm: NAME")},
    "workload.temperature": {"value": ("is out of range ({v})", "write a number >= 0 (0 is greedy)"),
                             "type": ("must be a number, got {v!r}", "write a number >= 0 (0 is greedy)"),
                             "finite": ("must be a finite number, got {v!r}", "write a number >= 0 (0 is greedy)")},
    "workload.top_p": {"greater_than": ("must be above 0", "use a number in (0, 1], 1 for no nucleus cut"),
                       "value": ("is out of range ({v})", "write a number in (0, 1]"),
                       "type": ("must be a number, got {v!r}", "write a number in (0, 1]"),
                       "finite": ("must be a finite number, got {v!r}", "write a number in (0, 1]")},
    "workload.weights": {"type": ("must be a list of numbers, one per load level, got {v!r}",
                                  "write e.g. weights: [1, 2, 1]")},
    "workload.weights[]": {"field": "workload.weights",
                           "value": ("has a weight of {v!r}", _WEIGHTS_FIX),
                           "type": ("must be a number, got {v!r}", "write positive numbers, one per load level"),
                           "finite": ("must be a finite number, got {v!r}",
                                      "write positive numbers, one per load level")},
    "search.cudagraph_mode": {"type": ("must be a non-empty list", f"list some of: {_MODES}")},
    "search.capture_sizes.*": {"type": ("must be a list of sizes or {{pattern, max}}, got {v!r}",
                                        "write e.g. [1, 2, 4, 8] or {{pattern: pow2, max: 64}}"),
                               "too_short": ("is an empty list", "list at least one capture size, e.g. [1, 2, 4, 8]")},
    "search.capture_sizes.*[]": {"less_than_equal": _CAPTURE_SIZE_HINT},
    "search.capture_sizes.*.pattern": {"value": ("unknown pattern {v!r}", "use one of: pow2, step8, aligned")},
    "search.capture_sizes.*.max": {"missing": ("is missing", "give the largest capture size, e.g. max: 64"),
                                   "less_than_equal": _CAPTURE_SIZE_HINT},
    "search.drafts.*.method": {"value": ("unknown speculative method {v!r}",
                                         "use one of: ngram, draft_model, eagle, eagle3, mtp, medusa, suffix"),
                               "missing": ("is missing", "add method: one of ngram, draft_model, eagle, eagle3, "
                                                         "mtp, medusa, suffix")},
    "search.engine_args.*": {"key": ("cannot be searched as an engine argument",
                                     "search graphs and speculation with cudagraph_mode, capture_sizes, "
                                     "num_speculative_tokens and drafts; the model is fixed"),
                             "type": ("must be a list of values or {{low, high}}, got {v!r}",
                                      "write e.g. [4, 8, 16] or {{low: 512, high: 8192, log: true}}")},
    "search.engine_args.*[]": {"type": ("must be a string, number or boolean, got {v!r}", "list plain values")},
    "search.engine_args.*.low": {"type": ("must be a number, got {v!r}", "give both low and high as numbers"),
                                 "finite": ("must be a finite number, got {v!r}",
                                            "give both low and high as finite numbers")},
    "search.engine_args.*.high": {"type": ("must be a number, got {v!r}", "give both low and high as numbers"),
                                  "finite": ("must be a finite number, got {v!r}",
                                             "give both low and high as finite numbers")},
}
_HINT_PATTERNS = [(re.compile(re.escape(k).replace(r"\*", r"[^.\[]+") + "$"), v) for k, v in _HINTS.items()]
_CLASSES = {"literal_error": "value", "greater_than_equal": "value", "greater_than": "value",
            "less_than_equal": "value", "less_than": "value", "finite_number": "finite", "missing": "missing"}


def _is_tag(part: Any) -> bool:
    """A union member's tag in pydantic's location (``'list[int]'``, ``'SizePattern'``, ``'int'``), not a key."""
    return isinstance(part, str) and part != "[key]" and (
        part in ("str", "int", "float", "bool", "none") or "[" in part or part[:1].isupper()
        or part.startswith(("function-", "constrained-", "literal[")))


def _path(loc: tuple[Any, ...]) -> str:
    """pydantic's location as a dotted path, ``search.capture_sizes.tiny[1]``."""
    out = ""
    for part in loc:
        if _is_tag(part) or part == "[key]":
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "top level"


def _at(raw: Any, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        if _is_tag(part):
            continue
        try:
            raw = raw[part]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _branch_errors(errors: Sequence[Mapping[str, Any]], raw: Any) -> tuple[Sequence[Mapping[str, Any]], Any]:
    """Keep the errors of the union member that matches the value's shape (a mapping: the model; a list: the
    list), so a typo inside ``{low, high, step}`` is reported as an unknown key, not as 'not a list'.

    Returns the errors left and, when the value matches no member's shape, the value (else ``None``).
    """
    while True:
        loc = tuple(errors[0]["loc"])
        # An unknown key ends its location: it is the user's word, never a union's tag (`Drafts:` looks like one).
        tags = loc[:-1] if errors[0]["type"] == "extra_forbidden" else loc
        i = next((n for n, part in enumerate(tags) if _is_tag(part)), None)
        if i is None:
            return errors, None
        prefix = loc[:i]
        value = _at(raw, prefix)
        wanted: Callable[[str], bool]
        if isinstance(value, dict):
            wanted = lambda tag: tag[:1].isupper() or tag.startswith("dict[")  # noqa: E731
        elif isinstance(value, list):
            wanted = lambda tag: tag.startswith("list[")  # noqa: E731
        else:  # a scalar: the scalar members
            wanted = lambda tag: not (tag[:1].isupper() or tag.startswith(("list[", "dict[")))  # noqa: E731
        kept = [e for e in errors if tuple(e["loc"])[:i] == prefix and len(e["loc"]) > i and wanted(e["loc"][i])]
        if not kept:
            return errors, value
        # Drop this union's tag, so a nested union is resolved the same way.
        errors = [{**e, "loc": (*tuple(e["loc"])[:i], *tuple(e["loc"])[i + 1:])} for e in kept]


def _field_info(loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None, Any]:
    """The model holding the last key of ``loc`` and the annotation of the last declared field on the way."""
    model: Any = SpaceFile
    parent: Any = None
    annotation: Any = None
    for part in loc:
        if _is_tag(part) or isinstance(part, int):
            continue
        parent = model
        if isinstance(model, type) and issubclass(model, BaseModel) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            inner = [a for a in members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
            model = inner[0] if inner else None
        # else: a mapping's key (its values keep the model), or the unknown key itself
    return parent, annotation


def _lower_bound(annotation: Any) -> int:
    """The ``ge`` bound of an annotation such as ``Positive | None`` (0 when it has none)."""
    stack = [annotation]
    while stack:
        item = stack.pop()
        for meta in getattr(item, "__metadata__", ()):
            for m in getattr(meta, "metadata", [meta]):
                if getattr(m, "ge", None) is not None:
                    return int(m.ge)
        stack.extend(getattr(item, "__args__", ()))
    return 0


def first_problem(exc: ValidationError, raw: Any) -> tuple[str, str, str]:
    """The first error of ``exc`` (raised validating ``raw``) as ``(dotted field, problem, fix)``."""
    errors, unmatched = _branch_errors(exc.errors(include_url=False), raw)
    # NaN or infinity fails every member of a union of scalars; "not finite" is the one that says why.
    first = next((e for e in errors if e["type"] == "finite_number"), errors[0])
    # A required key missing beside an unknown key at the same level is most often that key misspelled (`Workload:`,
    # `wörkload:`): the unknown key, with the keys allowed there, is the line that names the fix.
    if first["type"] == "missing":
        level = tuple(first["loc"])[:-1]
        first = next((e for e in errors if e["type"] == "extra_forbidden" and tuple(e["loc"])[:-1] == level), first)
    if first is not errors[0]:
        unmatched = None
    loc = tuple(first["loc"])
    field = _path(loc)
    if first["type"] == "extra_forbidden":
        # The unknown key is the user's word, never a union's tag, however it is spelled (`Workload:` looks like one).
        field = f"{_path(loc[:-1])}.{loc[-1]}" if _path(loc[:-1]) != "top level" else str(loc[-1])
    if first["type"] == "space_rule":
        ctx = first["ctx"]
        return f"{field}.{ctx['field']}", ctx["problem"], ctx["fix"]
    value = unmatched if unmatched is not None else first.get("input")
    kind, ctx = first["type"], first.get("ctx") or {}
    if unmatched is not None:
        cls = "type"
    elif loc and loc[-1] == "[key]":
        cls, value, kind = "key", loc[-2], "key"
    else:
        cls = _CLASSES.get(kind, "type")
    problem, fix = _generic(loc, field, kind, ctx, value, unmatched is not None)
    hint = next((h for pattern, h in _HINT_PATTERNS if pattern.match(re.sub(r"\[\d+\]", "[]", field))), {})
    if kind in hint or cls in hint:
        problem, hint_fix = hint.get(kind) or hint[cls]
        problem = problem.format(v=value)
        fix = hint_fix.format(v=value) if hint_fix is not None else _slo_fix(str(value))
    return hint.get("field", field), problem, fix


def _generic(loc: tuple[Any, ...], field: str, kind: str, ctx: dict[str, Any], value: Any,
             unmatched: bool) -> tuple[str, str]:
    if unmatched:
        return f"has the wrong type ({value!r})", "see `autotune schema` for the shape"
    if kind == "extra_forbidden":
        parent, _ = _field_info((*loc[:-1], "unknown key"))  # the unknown key itself may look like a union's tag
        allowed = list(parent.model_fields) if parent is not None else []
        return "unknown key", f"use one of: {', '.join(allowed)}" if allowed else "remove it"
    if kind == "missing":
        if "." not in field:
            return "section is missing", f"add a '{field}:' section"
        return "is missing", f"add {field.rsplit('.', 1)[-1]}:"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {type(value).__name__}", "write it as 'key: value' lines"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return f"must be an integer, got {value!r}", f"write a whole number >= {_lower_bound(_field_info(loc)[1])}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, got {value!r}", "write a number"
    if kind == "finite_number":
        return f"must be a finite number, got {value!r}", "write a finite number"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {value!r}", "write true or false"
    if kind == "string_type":
        return f"must be a text, got {value!r}", "write a text (quote it if it looks like a number)"
    if kind == "list_type":
        return f"must be a list, got {value!r}", "write a list, e.g. [a, b]"
    if kind == "literal_error":
        return f"unknown value {value!r}", "use one of: " + str(ctx.get("expected", "")).replace("'", "")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}, got {value!r}", f"use a value {op} {bound}"
    return str(ctx.get("error") or kind), "see `autotune schema` for the shape"


def _slo_fix(key: str) -> str:
    metric = re.match(r"^(ttft|tpot|itl|e2el|e2e)[_-]?p?(\d+)", key)
    hint = None
    if metric:
        name = "e2el" if metric.group(1) == "e2e" else metric.group(1)
        pct = int(metric.group(2))
        hint = latency_key(name, pct) if pct in LATENCY_PERCENTILES else None
    return (f"use METRIC_pP_ms with METRIC in {', '.join(LATENCY_METRICS)} and P in "
            f"{', '.join(map(str, LATENCY_PERCENTILES))}" + (f" (did you mean {hint}?)" if hint else ""))
