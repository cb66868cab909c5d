"""The shape of a space file as pydantic models: what keys exist, their types, bounds and defaults.

The loader (:func:`autotune.config.space.parse_space`) validates a file against :class:`SpaceFile` once, turns the
first error into the usual one line (``FILE: field.path: problem; fix: ...``, :func:`first_problem`) and builds
the space from the typed models, never from the file's dicts. A rule between the keys of one section (``high``
above ``low``, a draft method that needs a model, load levels with an aggregate) is that model's validator,
raising :func:`space_rule`; what spans sections or needs the file system (a feasible space, a dataset file's
rows) follows in the loader. ``autotune schema`` prints :func:`space_json_schema`, so an editor's YAML language
server checks the same shape while the file is written.

Every model is strict (YAML's ``"8"`` is not the number 8) and forbids unknown keys, except the free-form
sections that belong to other programs: ``engine`` options (each engine's own model checks them when the engine
is made, ``autotune.engines``), ``engine_args`` (vLLM's own arguments) and a draft's ``speculative_config``
fragment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from autotune.core.records import AGGREGATES, LATENCY_METRICS, LATENCY_PERCENTILES, Workload, latency_key

__all__ = ["CUDAGRAPH_MODES", "DEFAULT", "ENGINE_NAMES", "EngineArgs", "EngineSection", "SpaceFile",
           "engine_arg_problem", "first_problem", "space_json_schema"]

SLO_KEYS = tuple(latency_key(m, p) for m in LATENCY_METRICS for p in LATENCY_PERCENTILES)
_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

#: Numbers a space holds are finite and physically plausible (issue 32): sizes are bounded where they are read, so
#: a typo (``num_prompts: 1000000000000``) is one line at load, not a study that never ends or a number printed with
#: 301 digits. Each bound is far above any real use.
MAX_NUMBER = 1e15  # any number in a free-form section (vLLM's arguments, engine options, dataset options)
MAX_PROMPTS = 10**7
MAX_TOKENS = 10**8  # a prompt's or an output's length
MAX_CONCURRENCY = 10**6
MAX_PASSES = 10**4
MAX_SECONDS = 86_400.0  # a timed pass
MAX_MS = 86_400_000.0  # a latency limit: a day
MAX_SEED = 2**32 - 1  # numpy's seeds
#: The most draft tokens a configuration may verify (``num_speculative_tokens``, a draft's ``max_k``).
K_HARD_MAX = 16
#: Largest capture size a space may declare or generate. vLLM's own default stops at 512 and it never captures a
#: batch above ``max_num_batched_tokens``; the bound keeps a typo (``max: 1000000000``) from generating a list of
#: millions of sizes at load time.
MAX_CAPTURE_SIZE = 8192

Scalar = Union[str, int, float, bool]
WholeNumber = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
Prompts = Annotated[int, Field(ge=1, le=MAX_PROMPTS)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Level = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
# Literals over tuples built at run time, which pydantic validates against; the type checker reads them as text.
if TYPE_CHECKING:
    Aggregate = str
    SloKey = str
else:
    Aggregate, SloKey = Literal[AGGREGATES], Literal[SLO_KEYS]
Passes = Annotated[int, Field(ge=0, le=MAX_PASSES)]
Bounded = Annotated[float, Field(ge=-MAX_NUMBER, le=MAX_NUMBER)]


#: Names ``search.engine_args`` cannot search: the graph and speculation dimensions have their own keys, and the
#: model is what the study is about.
NOT_SEARCHABLE = ("compilation_config", "speculative_config", "num_speculative_tokens", "cudagraph_mode",
                  "capture_sizes", "draft", "model")


def _searchable(name: str) -> str:
    if name.replace("-", "_") in NOT_SEARCHABLE:
        raise PydanticCustomError("not_searchable", "cannot be searched as an engine argument")
    return name


class _Model(BaseModel):
    model_config = _STRICT


def space_rule(field: str, problem: str, fix: str) -> PydanticCustomError:
    """A rule relating a model's fields broken, raised from its ``model_validator``: reported at ``field`` (a key
    of that model) with its own problem and fix (:func:`first_problem`)."""
    return PydanticCustomError("space_rule", "{problem}", {"field": field, "problem": problem, "fix": fix})


class DatasetSpec(_Model):
    """``workload.dataset`` as a mapping: a file in a format, or a vLLM benchmark dataset by name."""

    format: Literal["synthetic", "jsonl", "sharegpt", "vllm"] | None = None
    path: str | None = None
    vllm: str | None = Field(None, description="vllm bench serve --dataset-name")
    args: dict[str, Scalar] | None = Field(None, description="vllm bench serve's --dataset options, without --")


#: What a key left out of ``workload:`` is: the record's own default (:class:`~autotune.core.records.Workload`),
#: so the file's schema, the loader and a workload built in code take one value, written once.
_WORKLOAD = Workload()


class WorkloadSpec(_Model):
    """``workload:``: what one timed pass runs. A key left out (or null) takes the field's default here; the
    loader builds the :class:`~autotune.core.records.Workload` from every field, never from the file's keys."""

    num_prompts: Prompts = _WORKLOAD.num_prompts
    input_len: Tokens = _WORKLOAD.input_len
    output_len: Tokens = _WORKLOAD.output_len
    # Workload's default is one level (an int); spelled as the field's own type, which a tuple is not.
    concurrency: Level | list[Level] = Field(_WORKLOAD.concurrency if isinstance(_WORKLOAD.concurrency, int)
                                             else list(_WORKLOAD.concurrency),
                                             description="one number, or load levels [1, 8, 32]")
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = _WORKLOAD.seed
    warmup_passes: Passes = _WORKLOAD.warmup_passes
    max_warmup_passes: Annotated[int, Field(ge=1, le=MAX_PASSES)] = _WORKLOAD.max_warmup_passes
    timed_passes: Annotated[int, Field(ge=1, le=MAX_PASSES)] = _WORKLOAD.timed_passes
    pass_seconds: Annotated[float, Field(ge=0.0, le=MAX_SECONDS)] = Field(
        _WORKLOAD.pass_seconds, description="seconds a timed pass lasts (0: one round)")
    repetitive_prompts: bool = Field(_WORKLOAD.repetitive_prompts,
                                     description="synthetic prompts from a repeated n-gram (ngram drafts can hit)")
    dataset: str | DatasetSpec | None = Field(None, description="a path, 'synthetic', or a mapping")
    temperature: Annotated[float, Field(ge=0.0, le=100.0)] = _WORKLOAD.temperature
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = _WORKLOAD.top_p
    aggregate: Aggregate | None = None
    weights: list[Annotated[float, Field(gt=0.0, le=MAX_NUMBER)]] | None = None

    @property
    def levels(self) -> list[int]:
        return self.concurrency if isinstance(self.concurrency, list) else [self.concurrency]

    @model_validator(mode="after")
    def _rules(self) -> WorkloadSpec:
        """Keys that go together: load levels with a rule to combine them, weights with a mean, warm-up caps."""
        levels = self.levels
        if not levels:
            raise space_rule("concurrency", "is an empty list", "give one number, or load levels such as [1, 8, 32]")
        if len(set(levels)) != len(levels):
            raise space_rule("concurrency", f"repeats a load level ({levels})", "list each level once")
        if len(levels) > 1 and self.aggregate is None:
            raise space_rule("aggregate", f"is missing: {len(levels)} load levels need a rule to make one value",
                             "add aggregate: min (the worst level's value) or aggregate: mean")
        if len(levels) == 1 and (self.aggregate is not None or self.weights):
            key = "aggregate" if self.aggregate is not None else "weights"
            raise space_rule(key, "applies to several load levels, but concurrency is one number",
                             f"remove {key}, or give load levels such as concurrency: [1, 8, 32]")
        if self.weights and self.aggregate != "mean":
            raise space_rule("weights", "apply to aggregate: mean only", "set aggregate: mean, or remove weights")
        if self.weights and len(self.weights) != len(levels):
            raise space_rule("weights", f"has {len(self.weights)} weights for {len(levels)} load levels",
                             "give one weight per level, in the order of concurrency")
        if self.max_warmup_passes < self.warmup_passes:
            raise space_rule("max_warmup_passes", "is below warmup_passes", "make it >= warmup_passes")
        return self


CaptureSize = Annotated[int, Field(ge=1, le=MAX_CAPTURE_SIZE)]


class SizePattern(_Model):
    """A generated capture-size list, ``{pattern: pow2, max: 64}``, or an explicit maximum alone, ``{max: 64}``
    (vLLM's ``max_cudagraph_capture_size``; in ``decode_capture_requests``, ``max_decode_cudagraph_capture_requests``),
    whose sizes the engine then picks."""

    pattern: Literal["pow2", "step8", "aligned"] | None = None
    max: CaptureSize


class KRange(_Model):
    """``num_speculative_tokens: {low, high}``; 0 turns speculation off. With load levels it may also be a schedule
    (K by batch size, vLLM >= 0.26.0): given as choices (``schedules``), or derived from the levels' best K."""

    low: WholeNumber = 0
    high: WholeNumber = 0
    schedules: dict[str, list[list[int]]] | None = Field(
        None, description="named K schedules to search: [[start, end, K], ...] over batch sizes, contiguous from 1")
    schedule: Literal["derive", "off"] | None = Field(
        None, description="derive (the default with load levels): verify a schedule of the levels' best K; off")

    @model_validator(mode="after")
    def _a_range(self) -> KRange:
        if self.low > K_HARD_MAX:
            raise space_rule("low", f"K={self.low} is out of range", f"use at most {K_HARD_MAX} draft tokens")
        if self.high < self.low:
            raise space_rule("high", f"is below low ({self.high} < {self.low})", "make high >= low")
        if self.high > K_HARD_MAX:
            raise space_rule("high", f"K={self.high} is out of range", f"use at most {K_HARD_MAX} draft tokens")
        return self


#: Draft methods that run a draft model of their own (``model:``).
_NEEDS_MODEL = ("draft_model", "eagle", "eagle3", "medusa")


class Draft(BaseModel):
    """A vLLM ``speculative_config`` fragment; ``max_k`` caps K for this draft. Other keys go to vLLM as written."""

    model_config = ConfigDict(strict=True, extra="allow")
    method: Literal["ngram", "draft_model", "eagle", "eagle3", "mtp", "medusa", "suffix"]
    model: str | None = None
    max_k: Positive | None = None
    prompt_lookup_min: Positive | None = Field(None, description="ngram: the shortest n-gram matched")
    prompt_lookup_max: Positive | None = Field(None, description="ngram: the longest n-gram matched")

    @model_validator(mode="after")
    def _rules(self) -> Draft:
        if "num_speculative_tokens" in (self.model_extra or {}):
            raise space_rule("num_speculative_tokens", "is searched, not fixed per draft",
                             "remove it and set search.num_speculative_tokens instead")
        if self.method in _NEEDS_MODEL and not self.model:
            raise space_rule("model", f"method {self.method} needs a draft model", "add model: PATH-OR-HUB-ID")
        low, high = self.prompt_lookup_min, self.prompt_lookup_max
        if low is not None and high is not None and high < low:
            raise space_rule("prompt_lookup_max", "is below prompt_lookup_min",
                             "make prompt_lookup_max >= prompt_lookup_min")
        if self.max_k is not None and self.max_k > K_HARD_MAX:
            raise space_rule("max_k", f"{self.max_k} is out of range", f"use at most {K_HARD_MAX}")
        return self

    def fragment(self) -> dict[str, Any]:
        """The ``speculative_config`` keys as written, less ``max_k`` (autotune's own cap, not vLLM's)."""
        return {k: v for k, v in self.model_dump(exclude_unset=True).items() if k != "max_k"}


class EngineArgRange(_Model):
    """A numeric range for a searched engine argument; ``baseline`` defaults to ``low``."""

    low: Bounded
    high: Bounded
    log: bool = False
    baseline: Bounded | None = None


#: Largest size, length or count a space may give vLLM (tokens, sequences, bytes): far above any machine, far below
#: the overflow a typo (``10**30``) would bring.
MAX_SIZE = 10**15
Size = Annotated[int, Field(ge=1, le=MAX_SIZE)]
Parallel = Annotated[int, Field(ge=1, le=4096)]


class EngineArgs(BaseModel):
    """``engine_args``: vLLM's own arguments. The ones autotune reads or sizes are typed (a boolean is not an
    integer: YAML's ``true`` is not 1); the rest go to vLLM as written. ``-`` and ``_`` spell one name."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    model: str | None = None
    max_num_seqs: Size | None = None
    max_model_len: Size | None = None
    max_num_batched_tokens: Size | None = None
    block_size: Size | None = None
    kv_cache_memory_bytes: Size | None = None
    tensor_parallel_size: Parallel | None = None
    pipeline_parallel_size: Parallel | None = None
    data_parallel_size: Parallel | None = None
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    trust_remote_code: bool | None = None
    skip_tokenizer_init: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        """``max-num-seqs`` is checked as ``max_num_seqs`` (a name given both ways is the loader's to refuse)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for key in data:
            norm = str(key).replace("-", "_")
            if norm != key and norm in cls.model_fields and norm not in data:
                out[norm] = out.pop(key)
        return out


def engine_arg_problem(name: str, value: Any) -> tuple[str, str] | None:
    """Why ``value`` cannot be vLLM's argument ``name`` (a searched choice or bound), as ``(problem, fix)``."""
    try:
        EngineArgs.model_validate({name: value})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        annotation = EngineArgs.model_fields[name.replace("-", "_")].annotation
        kinds = {type(None)} ^ set(_members(annotation))
        if bool in kinds:
            return f"must be true or false, got {value!r}", "write true or false"
        if int in kinds:
            low, high = _bounds(annotation)
            return f"must be a whole number from {low} to {high}, got {value!r}", "write whole numbers (true is not 1)"
        return f"{error['msg'].lower()}, got {value!r}", "see `autotune schema` for the shape"
    return None


def _bounds(annotation: Any) -> tuple[Any, Any]:
    low = high = None
    stack = [annotation]
    while stack:
        item = stack.pop()
        for meta in getattr(item, "__metadata__", ()):
            for m in getattr(meta, "metadata", [meta]):
                low = getattr(m, "ge", None) if getattr(m, "ge", None) is not None else low
                high = getattr(m, "le", None) if getattr(m, "le", None) is not None else high
        stack.extend(getattr(item, "__args__", ()))
    return low, high


#: vLLM's ``CUDAGraphMode`` values.
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
#: The choice that leaves a setting to the engine (always a choice of ``cudagraph_mode`` and ``capture_sizes``).
DEFAULT = "default"


class SearchSpec(_Model):
    """``search:``: the dimensions the study explores."""

    cudagraph_mode: Annotated[list[str], Field(min_length=1)] = Field(
        [DEFAULT], description=f"some of {', '.join(CUDAGRAPH_MODES)} ({DEFAULT} is always a choice)")
    capture_sizes: dict[str, Annotated[list[CaptureSize], Field(min_length=1)] | SizePattern | None] | None = None
    decode_capture_requests: dict[str, Annotated[list[CaptureSize], Field(min_length=1)] | SizePattern] | None = Field(
        None, description="decode CUDA graphs in requests (vLLM >= 0.34's decode_cudagraph_capture_request_sizes, each "
                          "captured as requests x (1+K) tokens): name: [1, 2, 4] or {pattern: pow2, max: 16} or {max: 16}")
    num_speculative_tokens: KRange = KRange()
    drafts: dict[str, Draft] | None = None
    engine_args: dict[Annotated[str, AfterValidator(_searchable)], list[Scalar] | EngineArgRange] | None = Field(
        None, description="name: [choices] or name: {low, high, log, baseline}")

    @model_validator(mode="after")
    def _names(self) -> SearchSpec:
        for i, mode in enumerate(self.cudagraph_mode):
            if mode != DEFAULT and mode.upper() not in CUDAGRAPH_MODES:
                raise space_rule(f"cudagraph_mode[{i}]", f"unknown mode {mode!r}",
                                 f"use one of: {', '.join(CUDAGRAPH_MODES)}")
        for name, spec in (self.capture_sizes or {}).items():
            if name == DEFAULT and spec is not None:
                raise space_rule(f"capture_sizes.{name}", f"'{DEFAULT}' is reserved for the engine's own sizes",
                                 "give this list another name")
            if name != DEFAULT and spec is None:
                raise space_rule(f"capture_sizes.{name}", "must be a list of sizes or {pattern, max}, got None",
                                 "write e.g. [1, 2, 4, 8] or {pattern: pow2, max: 64}")
        for name, spec in (self.decode_capture_requests or {}).items():
            # Both kinds are choices of one dimension, named once: a name in both would be two meanings.
            if name == DEFAULT or name in (self.capture_sizes or {}):
                raise space_rule(f"decode_capture_requests.{name}", f"the name {name!r} is already a capture_sizes "
                                 "choice" if name != DEFAULT else f"'{DEFAULT}' is reserved for the engine's own sizes",
                                 "give this list another name")
            if isinstance(spec, SizePattern) and spec.pattern == "aligned":
                raise space_rule(f"decode_capture_requests.{name}.pattern", "aligned makes token sizes whole "
                                 "requests of 1+K; request counts are whole requests already",
                                 "use pattern: pow2 or step8")
        return self


class OutputCheckSpec(_Model):
    """``output_check:``: how closely a configuration's greedy outputs must match the baseline's to win."""

    min_agreement: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        None, description="lowest fraction of checked prompts agreeing with the baseline (default 0.9; 0: off)")


#: The engines a space may name (``autotune.engines.ENGINES``; config cannot import the engines, a test keeps the
#: two the same).
EngineName = Literal["sim", "cmd", "vllm"]
ENGINE_NAMES: tuple[str, ...] = get_args(EngineName)


class EngineSection(BaseModel):
    """``engine:``: the engine a study runs unless ``--engine`` says otherwise (``name``; unset: vllm) and each
    engine's options under its name. The options are the engine's to validate: each engine's model
    (``autotune.engines``) checks them, once, when the engine is made. Keys beside ``name`` and the sections are
    options of the space's own engine (``engine: {name: cmd, command: [...]}``)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    name: EngineName | None = Field(
        None, description="the engine a study runs: sim, cmd or vllm (unset: vllm)")
    sim: dict[str, Any] | None = Field(None, description="the simulator's options")
    cmd: dict[str, Any] | None = Field(None, description="the cmd engine's options")
    vllm: dict[str, Any] | None = Field(None, description="the vllm engine's options")

    @property
    def default(self) -> str:
        """The engine a study runs unless ``--engine`` names another."""
        return self.name or "vllm"

    def options(self, engine: str) -> dict[str, Any]:
        """``engine``'s options as written: its section, over the flat keys where it is the space's own engine."""
        flat = dict(self.model_extra or {}) if engine == self.default else {}
        return {**flat, **(getattr(self, engine, None) or {})}

    def sections(self) -> dict[str, dict[str, Any]]:
        """The options of each engine the section gives any to (whichever engine a command runs, all are
        checked)."""
        named = [e for e in ENGINE_NAMES if getattr(self, e) is not None or (e == self.default and self.model_extra)]
        return {e: self.options(e) for e in named}


class SpaceFile(_Model):
    """An autotune search space file (``autotune tune --space FILE``)."""

    model_config = ConfigDict(**_STRICT, title="autotune search space")
    name: str | int | float | None = None
    description: str | int | float | None = None
    engine: EngineSection | None = Field(None, description="name: sim|cmd|vllm, and options per engine")
    engine_args: EngineArgs = Field(description="fixed vLLM engine arguments (model, max_model_len, ...)")
    workload: WorkloadSpec
    search: SearchSpec
    objective: Literal["throughput", "goodput"] = "throughput"
    slo: dict[SloKey, Annotated[float, Field(gt=0.0, le=MAX_MS)]] | None = Field(
        None, description="latency limits in milliseconds, e.g. {tpot_p99_ms: 50}")
    output_check: OutputCheckSpec | None = None


def space_json_schema() -> dict[str, Any]:
    """The JSON Schema of a space file."""
    schema = SpaceFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


# -- errors --------------------------------------------------------------------------------------------------

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
            inner = [a for a in _members(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
            model = inner[0] if inner else None
        # else: a mapping's key (its values keep the model), or the unknown key itself
    return parent, annotation


def _members(annotation: Any) -> list[Any]:
    args = getattr(annotation, "__args__", None)
    if not args:
        return [annotation]
    return [m for a in args for m in _members(a)]


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
