"""The shape of a space file as pydantic models: what keys exist, their types, bounds and defaults.

The loader (:func:`autotune.config.space.parse_space`) validates a file against :class:`SpaceFile` once, turns the
first error into the usual one line (``FILE: field.path: problem; fix: ...``, :mod:`autotune.config._problems`) and builds
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

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from autotune.core.records import AGGREGATES, LATENCY_METRICS, LATENCY_PERCENTILES, Workload, latency_key

__all__ = ["CUDAGRAPH_MODES", "DEFAULT", "ENGINE_NAMES", "EngineArgs", "EngineSection", "SpaceFile",
           "engine_arg_problem", "space_json_schema"]

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
        kinds = {type(None)} ^ set(members(annotation))
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

    def options(self, engine: str) -> dict[str, object]:
        """``engine``'s options as written: its section, over the flat keys where it is the space's own engine.
        Unchecked values (``object``): the engine's own model validates them when the engine is made
        (:data:`autotune.engines.RawOptions`, :meth:`autotune.engines.EngineOptions.parse`)."""
        flat = dict(self.model_extra or {}) if engine == self.default else {}
        return {**flat, **(getattr(self, engine, None) or {})}

    def sections(self) -> dict[str, dict[str, object]]:
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


def members(annotation: Any) -> list[Any]:
    """The types a (possibly nested) union annotation admits."""
    args = getattr(annotation, "__args__", None)
    if not args:
        return [annotation]
    return [m for a in args for m in members(a)]
