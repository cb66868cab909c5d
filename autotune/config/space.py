"""Search spaces: load and validate a YAML file, suggest engine configurations from an Optuna trial.

A space file declares the fixed engine arguments, the workload and the searched parameters::

    name: gb10-moe
    engine: {name: sim, profile: gb10, model_profile: moe}     # default engine and its options
    engine_args: {model: sim/moe, max_num_seqs: 4, max_model_len: 2048}
    workload: {num_prompts: 16, input_len: 128, output_len: 128, concurrency: 4}   # see autotune.config.workload
    slo: {tpot_p99_ms: 50}                                    # optional latency limits (milliseconds)
    objective: throughput                                     # output tok/s subject to the slo limits, or goodput
    search:
      cudagraph_mode: [NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE]
      capture_sizes:
        tiny: [1, 2, 4, 8]                      # a named preset
        pow2-64: {pattern: pow2, max: 64}       # generated: a pattern plus a maximum size
        aligned-64: {pattern: aligned, max: 64} # multiples of 1+K, so verification batches fit
      num_speculative_tokens: {low: 0, high: 6} # 0 = speculation off
      drafts:                                   # vLLM speculative_config fragments; used only when K > 0
        ngram: {method: ngram, prompt_lookup_min: 2, prompt_lookup_max: 5}
        small-draft: {method: draft_model, model: ./models/draft, max_k: 8}

The name ``default`` is always a choice of ``cudagraph_mode`` and ``capture_sizes``: it leaves the key unset so
the engine picks, which is what the baselines run. Every suggested configuration is expressed in vLLM's own
names (``compilation_config.cudagraph_mode``, ``compilation_config.cudagraph_capture_sizes``,
``speculative_config.*``), so the engines and the exporter share one translation.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from autotune.core import params as P
from autotune.core.params import ParamValue, TrialParams
from autotune.core.records import GOODPUT_METRICS, EngineConfig, Workload
from autotune.core.records import OBJECTIVES as RECORD_OBJECTIVES
from autotune.config._capture import Infeasible, SizeOption, capture_fields
from autotune.config._engine_args import EngineArgDim, search_dims, spelled
from autotune.config._models import MAX_CAPTURE_SIZE  # noqa: F401 (the bound's old home; the models hold it now)
from autotune.config._models import (CUDAGRAPH_MODES, DEFAULT, K_HARD_MAX, MAX_NUMBER, Draft, EngineSection,
                                     SearchSpec, SizePattern, SpaceFile, space_json_schema)
from autotune.config._problems import first_problem
from autotune.config._schedule import FIXED, SCHEDULE_PARAM, derive_enabled, k_limit, parse_schedules, schedule_problem
from autotune.config._yaml import load_yaml, read_text
from autotune.core.schedule import SCHEDULE_KEY, KSchedule
from autotune.core.secrets import literal_secret
from autotune.config.workload import parse_slo, parse_workload, read_dataset

__all__ = [
    "CUDAGRAPH_MODES",
    "DEFAULT",
    "OBJECTIVES",
    "SCHEDULE_PARAM",
    "DraftOption",
    "EngineArgDim",
    "EngineSection",
    "EngineVocabulary",
    "Infeasible",
    "SearchSpace",
    "SizeOption",
    "SpaceError",
    "load_space",
    "load_space_text",
    "space_json_schema",
]

#: What a study maximises: output tokens/s subject to the ``slo:`` limits when there are any (``throughput``), or
#: requests/s that meet every limit (``goodput``, which needs limits to count against).
OBJECTIVES = RECORD_OBJECTIVES
#: Optuna parameter names the graph/speculation search uses; an engine argument cannot take one of them.
_CORE_PARAMS = P.CORE
_RESERVED_ENGINE_ARGS = ("compilation_config", "speculative_config", "num_speculative_tokens")

if TYPE_CHECKING:
    from optuna.trial import BaseTrial


class EngineVocabulary(Protocol):
    """What :meth:`SearchSpace.in_vocabulary` reads of an engine's vocabulary
    (:class:`autotune.engines.vllm.vocabulary.Vocabulary`, which the engines own: the space may not import them)."""

    @property
    def version(self) -> str: ...
    @property
    def speculative_methods(self) -> frozenset[str]: ...
    @property
    def rejection_methods(self) -> frozenset[str]: ...
    @property
    def capture_unit(self) -> str: ...
    def lacks_speculative(self, key: str) -> bool: ...
    def why_missing(self, name: str) -> str | None: ...


class SpaceError(ValueError):
    """A search space file is invalid. The message is one line: file, field, problem and fix."""

    def __init__(self, source: str, field: str, problem: str, fix: str) -> None:
        self.source, self.field, self.problem, self.fix = source, field, problem, fix
        super().__init__(f"{source}: {field}: {problem}; fix: {fix}")


@dataclasses.dataclass(frozen=True)
class DraftOption:
    """A named draft: a vLLM ``speculative_config`` fragment (without ``num_speculative_tokens``)."""

    name: str
    fragment: Mapping[str, Any]
    max_k: int | None = None

    @property
    def method(self) -> str:
        return str(self.fragment["method"])


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A validated search space. Build it with :func:`load_space`."""

    name: str
    source: str
    #: The ``engine:`` section: the space's own engine (``engine.default``) and each engine's options.
    engine: EngineSection
    engine_args: Mapping[str, Any]
    workload: Workload
    modes: tuple[str, ...]
    sizes: tuple[SizeOption, ...]
    k_low: int
    k_high: int
    drafts: tuple[DraftOption, ...]
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    description: str = ""
    objective: str = "throughput"
    engine_dims: tuple[EngineArgDim, ...] = ()
    #: Named K schedules the search chooses among (``search.num_speculative_tokens.schedules``).
    schedules: tuple[tuple[str, KSchedule], ...] = ()
    #: The verification takes in a schedule of the load levels' best K (``schedule: derive``).
    derive_schedule: bool = False
    #: Digest of the dataset's prompts as read at load (``None`` without a dataset file): part of the study's
    #: identity, so a dataset edited between runs is not mixed into one study.
    prompts_digest: str | None = None
    #: The unit the engine takes decode graphs in (:meth:`in_vocabulary`): ``tokens`` (vLLM <= 0.33) or
    #: ``requests`` (0.34+); configurations are written in that engine's own fields.
    capture_unit: str = "tokens"
    #: The vLLM version the space was put into the vocabulary of (``None``: as written).
    vllm_version: str | None = None

    @property
    def slo(self) -> dict[str, float]:
        """Latency limits in milliseconds (``tpot_p99_ms: 50``); empty when the space sets none."""
        return dict(self.workload.slo)

    @property
    def slo_constraints(self) -> dict[str, float]:
        """The limits a configuration's latency percentiles must meet to win: the ``slo`` under ``throughput``.

        Under ``goodput`` the limits are counted per request instead (a request that misses one is not good), so
        they constrain nothing on top: a configuration with a slow tail simply scores fewer good requests.
        """
        return {} if self.objective == "goodput" else self.slo

    # -- Optuna ------------------------------------------------------------------------------------------
    def suggest(self, trial: BaseTrial) -> EngineConfig:
        """Draw a configuration from an Optuna trial (define-by-run: draft parameters only when K > 0).

        Raises:
            Infeasible: the combination is one the engine rejects (e.g. K above a draft's ``max_k``).
        """
        mode = trial.suggest_categorical(P.MODE, list(self.modes))
        size_name = DEFAULT
        if mode != "NONE":
            size_name = trial.suggest_categorical(P.CAPTURE_SIZES, [s.name for s in self.sizes])
        chosen = trial.suggest_categorical(SCHEDULE_PARAM, [FIXED, *dict(self.schedules)]) if self.schedules else FIXED
        if chosen != FIXED:
            k = dict(self.schedules)[chosen].max_k
        else:
            k = trial.suggest_int(P.K, self.k_low, self.k_high) if self.k_high > 0 else 0
        draft_name = None
        if k > 0:
            draft_name = trial.suggest_categorical(P.DRAFT, [d.name for d in self.drafts])
        params: TrialParams = {P.MODE: mode, P.K: k}
        if mode != "NONE":
            params[P.CAPTURE_SIZES] = size_name
        if draft_name is not None:
            params[P.DRAFT] = draft_name
        if chosen != FIXED:
            params[SCHEDULE_PARAM] = chosen
        for dim in self.engine_dims:
            params[dim.name] = dim.suggest(trial)
        return self.config_from_params(params)

    def config_from_params(self, params: Mapping[str, ParamValue]) -> EngineConfig:
        """The configuration for a parameter dict (as stored on an Optuna trial).

        Raises:
            Infeasible: the combination is one the engine rejects.
            KeyError: a parameter names a choice this space does not have.
        """
        mode = params.get(P.MODE, DEFAULT)
        if not isinstance(mode, str):
            raise KeyError(f"{P.MODE} has no choice {mode!r}")
        schedule = self.schedule_of(params.get(SCHEDULE_PARAM))
        k = schedule.max_k if schedule is not None else _whole(params.get(P.K, 0))
        size_name = params.get(P.CAPTURE_SIZES, DEFAULT) if mode != "NONE" else DEFAULT
        compilation: dict[str, Any] = {}
        if mode != DEFAULT:
            compilation["cudagraph_mode"] = mode
        if mode != "NONE":
            compilation.update(capture_fields(self._size(size_name), k, mode, schedule is not None, self.capture_unit))
        spec = None
        draft_name = None
        if k > 0:
            draft = self._draft(params[P.DRAFT])
            draft_name = draft.name
            if draft.max_k is not None and k > draft.max_k:
                raise Infeasible(f"draft {draft.name!r} allows at most {draft.max_k} speculative tokens, got {k}")
            spec = {**dict(draft.fragment), "num_speculative_tokens": k}
            if schedule is not None:
                spec[SCHEDULE_KEY] = schedule.to_list()
            rates = spec.get("synthetic_acceptance_rates")
            if isinstance(rates, list):
                # Rates are per draft position and vLLM wants exactly K of them: a space lists them for its
                # largest K, each configuration takes the first K, so the exported config starts as measured.
                spec["synthetic_acceptance_rates"] = rates[:k]
        clean = {key: params[key] for key in _CORE_PARAMS
                 if key in params and not (key == P.CAPTURE_SIZES and mode == "NONE")
                 and not (key == P.DRAFT and k == 0) and not (key == SCHEDULE_PARAM and schedule is None)}
        if schedule is not None:
            clean[P.K] = k
        engine_args = dict(self.engine_args)
        for dim in self.engine_dims:
            engine_args[dim.name] = clean[dim.name] = params.get(dim.name, dim.baseline)
        return EngineConfig(
            engine_args=engine_args,
            compilation_config=compilation,
            speculative_config=spec,
            params=clean,
            draft=draft_name,
        )

    def param_names(self) -> tuple[str, ...]:
        """Every parameter name a configuration of this space may carry (``--params``, ``--enqueue``)."""
        return (*_CORE_PARAMS, *(dim.name for dim in self.engine_dims))

    def params_problem(self, params: Mapping[str, Any]) -> str | None:
        """Why ``params`` (Optuna's names, e.g. from ``--enqueue``) lie outside this space, or ``None``."""
        mode = params.get(P.MODE, DEFAULT)
        if mode not in self.modes:
            return f"cudagraph_mode {mode!r} is not in the space; use one of {', '.join(self.modes)}"
        size = params.get(P.CAPTURE_SIZES, DEFAULT)
        if size not in [s.name for s in self.sizes]:
            return f"capture_sizes has no choice {size!r}; use one of {', '.join(s.name for s in self.sizes)}"
        try:
            schedule = self.schedule_of(params.get(SCHEDULE_PARAM))
        except (KeyError, Infeasible) as exc:
            return str(exc.args[0])
        k = schedule.max_k if schedule is not None else params.get(P.K, 0)
        if schedule is None and isinstance(k, bool) or not isinstance(k, int) or not self.k_low <= k <= self.k_high:
            return (f"num_speculative_tokens {k!r} is outside the space; use a whole number from {self.k_low} to "
                    f"{self.k_high}")
        draft = params.get(P.DRAFT)
        if k > 0 and draft not in [d.name for d in self.drafts]:
            return f"drafts has no choice {draft!r}; use one of {', '.join(d.name for d in self.drafts)}"
        for dim in self.engine_dims:
            if dim.name in params:
                problem = dim.problem(params[dim.name])
                if problem is not None:
                    return problem
        try:
            self.config_from_params(params)
        except (KeyError, Infeasible) as exc:
            return str(exc.args[0])
        return None

    def schedule_of(self, value: Any) -> KSchedule | None:
        """The K schedule a ``k_schedule`` parameter names (``None``/``fixed``: one K).

        Raises:
            KeyError: an unknown schedule name.
            Infeasible: a derived schedule's list that breaks the schedule rules.
        """
        if value is None or value == FIXED:
            return None
        if isinstance(value, str):
            named = dict(self.schedules)
            if value not in named:
                raise KeyError(f"k_schedule has no choice {value!r}; use one of {', '.join([FIXED, *named])}")
            return named[value]
        problem = schedule_problem(value, self.workload.max_concurrency, k_limit(self.drafts, K_HARD_MAX))
        if problem is not None:
            raise Infeasible(problem)
        return KSchedule.of(value)

    def baseline_params(self) -> list[TrialParams]:
        """The enqueued first trials: speculation off with engine defaults, then defaults + first draft."""
        out: list[TrialParams] = [
            {P.MODE: DEFAULT, P.CAPTURE_SIZES: DEFAULT, P.K: 0},
        ]
        if self.drafts and self.k_high > 0:
            first = self.drafts[0]
            k = max(self.k_low, min(3, self.k_high, first.max_k or self.k_high))
            out.append({P.MODE: DEFAULT, P.CAPTURE_SIZES: DEFAULT,
                        P.K: k, P.DRAFT: first.name})
        for params in out:
            params.update({dim.name: dim.baseline for dim in self.engine_dims})
        return [self.complete_params(params) for params in out]

    def complete_params(self, params: Mapping[str, ParamValue]) -> TrialParams:
        """``params`` as an enqueued trial must hold them: in a space with named K schedules, ``k_schedule`` is
        ``fixed`` unless given. Optuna samples any parameter an enqueued trial leaves out, and ``k_schedule`` is
        drawn before K, so a queued fixed-K configuration - the engine-default baseline included - could be drawn
        as a schedule and run as one (seen on the H200: ``docs/measurements/h200-moe-schedule.md``)."""
        out = dict(params)
        if self.schedules:
            out.setdefault(SCHEDULE_PARAM, FIXED)
        return out

    def baseline(self) -> EngineConfig:
        """Speculation off, engine-default capture settings: what every winner is compared against."""
        return self.config_from_params(self.baseline_params()[0])

    def all_params(self) -> list[TrialParams]:
        """Every distinct parameter combination (for grids, ground truth and small spaces)."""
        out: list[TrialParams] = []
        for mode in self.modes:
            size_names = [DEFAULT] if mode == "NONE" else [s.name for s in self.sizes]
            for size_name in size_names:
                for k in range(self.k_low, self.k_high + 1):
                    drafts = [d.name for d in self.drafts] if k > 0 else [None]
                    for draft in drafts:
                        p: TrialParams = {P.MODE: mode, P.K: k}
                        if mode != "NONE":
                            p[P.CAPTURE_SIZES] = size_name
                        if draft is not None:
                            p[P.DRAFT] = draft
                        try:
                            self.config_from_params(p)
                        except Infeasible:
                            continue
                        out.append(p)
                for name in dict(self.schedules):
                    for option in self.drafts:
                        p = {P.MODE: mode, SCHEDULE_PARAM: name, P.DRAFT: option.name,
                             P.K: dict(self.schedules)[name].max_k}
                        if mode != "NONE":
                            p[P.CAPTURE_SIZES] = size_name
                        try:
                            self.config_from_params(p)
                        except Infeasible:
                            continue
                        out.append(p)
        for dim in self.engine_dims:
            out = [{**p, dim.name: value} for p in out for value in dim.grid()]
        return out

    def with_model(self, model: str) -> SearchSpace:
        """A copy with ``engine_args.model`` replaced (``make tune MODEL=...``)."""
        return dataclasses.replace(self, engine_args={**self.engine_args, "model": model})

    def check_model_paths(self) -> None:
        """For real engines: the target and every draft model must exist locally or be a hub id ``org/name``.

        Raises:
            SpaceError: naming the field and the fix.
        """
        _check_model_ref(self.source, "engine_args.model", self.engine_args.get("model"))
        for d in self.drafts:
            if "model" in d.fragment:
                _check_model_ref(self.source, f"search.drafts.{d.name}.model", d.fragment["model"])

    def in_vocabulary(self, vocab: EngineVocabulary | None) -> SearchSpace:
        """This space as the engine whose vocabulary is ``vocab`` takes it
        (:class:`autotune.engines.vllm.vocabulary.Vocabulary`; ``None``: as written, in tokens).

        A space written for another vLLM loads where its meaning is kept: capture sizes are written in the engine's
        own fields (:func:`autotune.config._capture.capture_fields`). A draft whose method or option the engine does not have is refused.

        Raises:
            SpaceError: one line naming the field and its replacement.
        """
        if vocab is None:
            return self
        version = vocab.version
        for draft in self.drafts:
            field = f"search.drafts.{draft.name}"
            # Why the version lacks a name is the vocabulary's to say (its features' versions: came in, removed in).
            if draft.method not in vocab.speculative_methods:
                why = vocab.why_missing(draft.method)
                raise SpaceError(self.source, f"{field}.method", f"{draft.method} is not a speculative method of "
                                 f"vLLM {version}" + (f" ({draft.method} {why})" if why else ""),
                                 "use eagle, eagle3 or mtp (a draft head), or draft_model (a small model)")
            for key, value in draft.fragment.items():
                if vocab.lacks_speculative(key):
                    why = vocab.why_missing(key) or ""
                    since = why.removeprefix("came in vLLM ") if why.startswith("came in") else None
                    raise SpaceError(self.source, f"{field}.{key}", f"vLLM {version} has no speculative option "
                                     f"{key}" + (f" ({why})" if why else ""),
                                     f"remove it, or run vLLM >= {since}" if since else "remove it")
            rejection = draft.fragment.get("rejection_sample_method")
            if rejection is not None and rejection not in vocab.rejection_methods:
                why = vocab.why_missing(rejection)
                raise SpaceError(self.source, f"{field}.rejection_sample_method", f"{rejection!r} is not a rejection "
                                 f"method of vLLM {version}" + (f" ({rejection} {why})" if why else ""), "use one of: "
                                 + ", ".join(sorted(vocab.rejection_methods)))
        return dataclasses.replace(self, capture_unit=vocab.capture_unit, vllm_version=version)

    def _size(self, name: ParamValue) -> SizeOption:
        for s in self.sizes:
            if s.name == name:
                return s
        raise KeyError(f"capture_sizes has no choice {name!r}")

    def _draft(self, name: ParamValue) -> DraftOption:
        for d in self.drafts:
            if d.name == name:
                return d
        raise KeyError(f"drafts has no choice {name!r}")


def _whole(value: ParamValue) -> int:
    """K as a number (``int()``'s reading, as Optuna and ``--enqueue`` give it); a list or none is no K."""
    if isinstance(value, list) or value is None:
        raise TypeError(f"{P.K} must be a whole number, got {value!r}")
    return int(value)


def _check_model_ref(source: str, field: str, ref: Any) -> None:
    if not ref:
        raise SpaceError(source, field, "is missing", "set it in the space file or pass --model PATH")
    ref = str(ref)
    if os.path.exists(ref):
        return
    looks_like_hub_id = ref.count("/") == 1 and not ref.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise SpaceError(source, field, f"model path {ref!r} does not exist",
                         "give an existing local model directory or a hub id like org/name")


# -- loading ---------------------------------------------------------------------------------------------


def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Load and validate a search space file.

    Raises:
        SpaceError: the file is missing, a directory, unreadable, not UTF-8, not YAML (or an alias bomb), or
            invalid; the message names the file, the field and the fix.
    """
    source = str(path)
    return load_space_text(read_text(path, _failing(source)), source, Path(path).resolve().parent)


def load_space_text(text: str, source: str = "<space>", base_dir: Path | None = None) -> SearchSpace:
    """Validate a space file's text (a stored study's space too): the same checks as :func:`load_space`."""
    return parse_space(load_yaml(text, _failing(source)), source=source, base_dir=base_dir)


def _failing(source: str) -> Any:
    return lambda field, problem, fix: SpaceError(source, field, problem, fix)


def parse_space(raw: Any, source: str = "<space>", base_dir: Path | None = None) -> SearchSpace:
    """Validate an already-parsed mapping (see :func:`load_space`)."""
    v = _Validator(source, base_dir or Path.cwd())
    top = v.mapping(raw, "top level")
    # A credential is a reference to the environment (``${HF_TOKEN}``), never a literal: checked before anything
    # else reads the file, so nothing is created for a space that holds one (autotune.core.secrets).
    literal = literal_secret(top, "")
    if literal is not None:
        raise SpaceError(source, *literal)
    model = check_shape(top, source)
    # Engine options are the engine's to validate (when it is made), but no section of a space holds NaN or 1e300.
    v.finite(top.get("engine"), "engine")
    v.finite(getattr(model.workload.dataset, "args", None), "workload.dataset.args")
    v.finite(top["search"].get("engine_args"), "search.engine_args")
    engine_args = v.engine_args(top["engine_args"])
    slo = parse_slo(model.slo, v.fail)
    workload = parse_workload(model.workload, v.fail, v.base_dir, slo)
    objective = model.objective
    if objective == "goodput" and not any(key.split("_p", 1)[0] in GOODPUT_METRICS for key, _ in slo):
        raise SpaceError(source, "slo", "objective: goodput counts requests meeting the slo limits, but none is set",
                         "add e.g. slo: {tpot_p99_ms: 50, ttft_p99_ms: 500} (ttft, tpot or e2el limits)")
    if objective == "goodput":
        for key, _ in slo:
            if key.split("_p", 1)[0] not in GOODPUT_METRICS:
                raise SpaceError(source, f"slo.{key}", "goodput judges each request by its own ttft, tpot and e2el; "
                                 "a single request has no inter-token percentile to hold to this limit",
                                 "use a tpot limit instead, or objective: throughput to constrain percentiles")
    workload = dataclasses.replace(workload, objective=objective)
    search = top["search"]
    modes = _modes(model.search)
    sizes = _sizes(model.search)
    k_spec = model.search.num_speculative_tokens
    k_low, k_high = k_spec.low, k_spec.high
    drafts = v.drafts(model.search.drafts or {})
    schedules = parse_schedules(k_spec, v.fail, workload.max_concurrency, drafts, K_HARD_MAX)
    if k_high > 0 and not drafts:
        raise SpaceError(source, "search.drafts", "is empty but num_speculative_tokens allows K > 0",
                         "declare at least one draft (e.g. ngram) or set num_speculative_tokens.high: 0")
    engine_dims = search_dims(search.get("engine_args"), engine_args, v.fail)
    if "max_num_seqs" not in engine_args and not any(d.name == "max_num_seqs" for d in engine_dims):
        engine_args["max_num_seqs"] = workload.max_concurrency
    if k_low > 0 and drafts and all(d.max_k is not None and d.max_k < k_low for d in drafts):
        most = max(d.max_k or 0 for d in drafts)
        raise SpaceError(source, "search.num_speculative_tokens.low",
                         f"no configuration is feasible: every K from {k_low} to {k_high} is above every draft's "
                         f"max_k (at most {most})", f"lower num_speculative_tokens.low to {most} or raise a max_k")
    max_model_len = engine_args.get("max_model_len")
    if isinstance(max_model_len, int) and not isinstance(max_model_len, bool) and \
            workload.output_len >= max_model_len:
        raise SpaceError(source, "workload.output_len", f"{workload.output_len} tokens leave no room for the prompt "
                         f"within engine_args.max_model_len={max_model_len}",
                         f"use an output_len below {max_model_len}, or raise engine_args.max_model_len")
    prompts_digest = read_dataset(workload.dataset, v.fail, max_model_len)
    space = SearchSpace(
        name=str(model.name or Path(source).stem), source=source, engine=model.engine or EngineSection(),
        engine_args=engine_args, workload=workload, modes=modes, sizes=sizes, k_low=k_low, k_high=k_high,
        drafts=drafts, raw=top, description="" if model.description is None else str(model.description),
        objective=objective, engine_dims=engine_dims, prompts_digest=prompts_digest, schedules=schedules,
        derive_schedule=derive_enabled(k_spec, workload.levels, k_high, v.fail),
    )
    if not space.all_params():
        raise SpaceError(source, "search", "no configuration is feasible (every combination is rejected)",
                         "widen num_speculative_tokens or the drafts' max_k")
    return space


def check_shape(top: Mapping[str, Any], source: str) -> SpaceFile:
    """Validate the file's keys and types against :class:`~autotune.config._models.SpaceFile` (the schema
    ``autotune schema`` prints) and return the typed file; the first problem becomes a one-line
    :class:`SpaceError`."""
    data = dict(top)
    workload = data.get("workload")
    if isinstance(workload, dict):
        # encode(Workload)'s shape (a stored workload read back): an unset key is null, no limits is {}.
        data["workload"] = {k: v for k, v in workload.items() if v is not None and not (k == "slo" and v == {})}
    try:
        return SpaceFile.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(source, *first_problem(exc, data)) from None


class _Validator:
    """The rules the models cannot say (names that normalise alike, numbers in free-form sections, paths relative
    to the space file); every failure is a :class:`SpaceError` naming the field and the fix. The keys, types and
    each section's own rules were checked against :class:`~autotune.config._models.SpaceFile` before."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source = source
        self.base_dir = base_dir

    def fail(self, field: str, problem: str, fix: str) -> SpaceError:
        return SpaceError(self.source, field, problem, fix)

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be a mapping, got {type(value).__name__}", "write it as 'key: value' lines")
        return value

    def finite(self, value: Any, field: str) -> None:
        """Free-form sections (vLLM's own arguments, draft, dataset and engine options) hold no NaN, infinity or
        absurd number: vLLM would take them as written, and a study would measure something nobody chose."""
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(field, f"must be a finite number, got {value!r}", "write a finite number")
        if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_NUMBER:
            raise self.fail(field, f"{value:.3g} is not a plausible value", f"use a number within ±{MAX_NUMBER:.0e}")
        if isinstance(value, dict):
            for key, item in value.items():
                self.finite(item, f"{field}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.finite(item, f"{field}[{i}]")

    def engine_args(self, args: dict[str, Any]) -> dict[str, Any]:
        self.finite(args, "engine_args")
        out: dict[str, Any] = {}
        for key, val in args.items():
            norm = str(key).replace("-", "_")
            if norm in _RESERVED_ENGINE_ARGS:
                raise self.fail(f"engine_args.{key}", "is set by the search",
                                "declare it under 'search:' (cudagraph_mode, capture_sizes, drafts) instead")
            if norm in out:
                raise self.fail(f"engine_args.{key}", f"names the same engine argument as {spelled(args, norm, key)} "
                                "(dashes and underscores are one name)", "keep one of the two")
            out[norm] = val
        return out

    def drafts(self, data: Mapping[str, Draft]) -> tuple[DraftOption, ...]:
        """The typed drafts (their rules checked by :class:`~autotune.config._models.Draft`) with a relative draft
        model path made absolute, as the engines run elsewhere."""
        out = []
        for name, spec in data.items():
            frag = spec.fragment()
            self.finite(frag, f"search.drafts.{name}")
            if isinstance(spec.model, str) and spec.model.startswith("."):
                frag["model"] = str((self.base_dir / spec.model).resolve())
            out.append(DraftOption(str(name), frag, spec.max_k))
        return tuple(out)


def _modes(search: SearchSpec) -> tuple[str, ...]:
    """The checked ``cudagraph_mode`` choices in vLLM's spelling, once each, with ``default`` first."""
    out = [DEFAULT]
    for m in search.cudagraph_mode:
        mode = DEFAULT if m == DEFAULT else m.upper()
        if mode not in out:
            out.append(mode)
    return tuple(out)


def _sizes(search: SearchSpec) -> tuple[SizeOption, ...]:
    """The checked ``capture_sizes`` choices (each list non-empty, each size bounded) with ``default`` first."""
    out = [SizeOption(DEFAULT)]
    for unit, choices in (("tokens", search.capture_sizes), ("requests", search.decode_capture_requests)):
        for name, spec in (choices or {}).items():
            if isinstance(spec, SizePattern):
                out.append(SizeOption(name, pattern=spec.pattern, max=spec.max, unit=unit))
            elif spec is not None:  # (``default: null`` is the engine's own sizes, already first)
                out.append(SizeOption(name, sizes=tuple(spec), unit=unit))
    return tuple(out)
