"""Frozen records that a trial flows through.

Everything autotune persists (Optuna user attrs, MLflow, reports, exports) goes through these records and
their ``to_dict``/``from_dict`` pairs, so there is one JSON shape per concept.

* :class:`Dataset` - where a workload's prompts come from.
* :class:`Workload` - what one timed pass runs.
* :class:`EngineConfig` - what we ask the engine for, in vLLM's own names.
* :class:`Resolved` - what the engine says it actually ran after start-up (defined in :mod:`autotune.core.resolved`,
  with the differences it reveals).
* :class:`RestartResult` - one fresh engine process: status, passes, resolved config, error.
* :class:`EngineFacts` - which engine ran: name, version, GPU, driver, CUDA.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.facts import FactValue, clean_facts
from autotune.core.plausible import MAX_TOK_S, implausible, plausible_facts, throughput_problem
from autotune.core.redact import redact
from autotune.core.resolved import Detail, Difference, Resolved
from autotune.core.schedule import KSchedule, canonical_spec, schedule_differences, schedule_of

__all__ = [
    "AGGREGATES",
    "GOODPUT_METRICS",
    "LATENCY_METRICS",
    "LATENCY_PERCENTILES",
    "OBJECTIVES",
    "OBJECTIVE_UNITS",
    "Dataset",
    "Detail",
    "Difference",
    "EngineConfig",
    "EngineFacts",
    "LevelResult",
    "RestartResult",
    "RestartStatus",
    "Resolved",
    "Workload",
    "combine_latency",
    "config_differences",
    "latency_key",
    "speculation_plan_change",
    "throughput_problem",
]


class RestartStatus:
    """String constants for :attr:`RestartResult.status` (strings so they survive JSON unchanged)."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ALL = (OK, FAILED, TIMEOUT)


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


#: Per-request latencies every engine that measures latency reports (vLLM ``bench serve``'s names): time to first
#: token, time per output token after the first, inter-token latency, end-to-end latency.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
#: Percentiles reported for each latency metric.
LATENCY_PERCENTILES = (50, 90, 99)


#: What a restart's value can be: output tokens/s (``throughput``) or requests/s that meet every SLO limit
#: (``goodput``), each with the unit every report prints.
OBJECTIVES = ("throughput", "goodput")
OBJECTIVE_UNITS = {"throughput": "tok/s", "goodput": "req/s"}
#: Per-request latencies a goodput counts against (vLLM's definition: there is no per-request ITL to hold).
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
#: How several load levels make one value: the worst level's, or a (weighted) mean of the levels'.
AGGREGATES = ("min", "mean")


def latency_key(metric: str, percentile: int) -> str:
    """The flat key of one latency percentile in milliseconds, e.g. ``tpot_p99_ms`` (also an SLO's name)."""
    return f"{metric}_p{percentile}_ms"


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Where a workload's prompts come from.

    Attributes:
        source: ``synthetic`` (token-id prompts: no tokenizer needed), ``jsonl`` (one ``{"prompt": text}`` or
            ``{"messages": [...]}`` object a line, optional ``output_len``), ``sharegpt`` (a ShareGPT JSON file) or
            ``vllm`` (any dataset vLLM's benchmark loaders read, by ``name``).
        path: The file (``jsonl``, ``sharegpt``; optional for ``vllm``).
        name: vLLM's dataset name (``sharegpt``, ``spec_bench``, ``spec_bench``, ``random``, ...) for ``source: vllm``.
        args: Extra dataset options for vLLM's loaders as ``(name, value)`` pairs (``vllm bench serve``'s
            ``--<name>`` options without the dashes), sorted, so the record stays hashable.
    """

    source: str = "synthetic"
    path: str | None = None
    name: str | None = None
    args: tuple[tuple[str, Any], ...] = ()

    @property
    def is_text(self) -> bool:
        """True when prompts are real text (tokenized with the model's tokenizer), not synthetic token ids."""
        return self.source != "synthetic" and not (self.source == "vllm" and self.name == "random")

    def describe(self) -> str:
        """One phrase for reports: ``synthetic token-id prompts``, ``prompts.jsonl (jsonl)``, ``vLLM spec_bench``."""
        if self.source == "synthetic":
            return "synthetic token-id prompts"
        if self.source == "vllm":
            return f"vLLM dataset {self.name}" + (f" ({self.path})" if self.path else "")
        return f"{self.path} ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "name": self.name, "args": dict(self.args)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dataset:
        args = data.get("args") or {}
        return cls(source=str(data.get("source", "synthetic")), path=data.get("path"), name=data.get("name"),
                   args=tuple(sorted(dict(args).items())))


@dataclasses.dataclass(frozen=True)
class Workload:
    """The decode workload one timed pass runs.

    Attributes:
        num_prompts: Prompts per pass.
        input_len: Prompt length in tokens.
        output_len: Generated tokens per prompt (``ignore_eos``, so every pass does the same work).
        concurrency: Requests in flight at once (offline: at most this many submitted; serve:
            ``--max-concurrency``), or a tuple of load levels: one engine start measures each level in turn.
        seed: Seed for prompt generation and sampling.
        warmup_passes: Minimum warm-up passes per restart (recorded, never counted).
        max_warmup_passes: Cap on warm-up passes while waiting for throughput to settle.
        timed_passes: Timed passes per restart; their mean is the restart's value.
        pass_seconds: How long a timed pass should last: it runs whole rounds of the prompts, as many as the warm-up
            rate says fill this (0: one round a pass).
        repetitive_prompts: Build prompts from a repeated n-gram so prompt-lookup (ngram) drafting can hit
            (synthetic prompts only).
        dataset: Where prompts come from; ``None`` leaves it to the engine (the ``vllm`` engine uses
            autotune's shipped prompts for a real checkpoint, synthetic token ids for dummy weights).
        temperature: Sampling temperature (0 = greedy).
        top_p: Nucleus sampling mass.
        slo: Per-request latency limits ``(key, ms)`` such as ``("tpot_p99_ms", 50.0)``: engines that measure
            latency count requests meeting every limit (goodput).
        objective: What a restart's value is (:data:`OBJECTIVES`): output tok/s or goodput (req/s).
        aggregate: With several load levels, how their values make the restart's (:data:`AGGREGATES`).
        weights: With ``aggregate: mean``, one weight per level (empty: equal weights).
    """

    num_prompts: int = 16
    input_len: int = 128
    output_len: int = 128
    concurrency: int | tuple[int, ...] = 4
    seed: int = 0
    warmup_passes: int = 1
    max_warmup_passes: int = 4
    timed_passes: int = 3
    pass_seconds: float = 5.0
    repetitive_prompts: bool = True
    dataset: Dataset | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    slo: tuple[tuple[str, float], ...] = ()
    objective: str = "throughput"
    aggregate: str | None = None
    weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # Accept the JSON shapes too (``Workload(**workload.to_dict())``); stored as hashable records.
        if isinstance(self.concurrency, (list, tuple)):
            levels = tuple(int(c) for c in self.concurrency)
            object.__setattr__(self, "concurrency", levels[0] if len(levels) == 1 else levels)
        if not isinstance(self.weights, tuple):
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if isinstance(self.dataset, Mapping):
            object.__setattr__(self, "dataset", Dataset.from_dict(self.dataset))
        if isinstance(self.slo, Mapping) or (self.slo and not isinstance(self.slo, tuple)):
            items = self.slo.items() if isinstance(self.slo, Mapping) else self.slo
            object.__setattr__(self, "slo", tuple(sorted((str(k), float(v)) for k, v in items)))

    @property
    def synthetic(self) -> bool:
        """True when prompts are synthetic token ids (explicitly, or by default with no dataset)."""
        return self.dataset is None or not self.dataset.is_text

    @property
    def levels(self) -> tuple[int, ...]:
        """The load levels one restart measures, in order (one level: ``(concurrency,)``)."""
        return self.concurrency if isinstance(self.concurrency, tuple) else (int(self.concurrency),)

    @property
    def max_concurrency(self) -> int:
        """The most requests in flight at any level (what the engine must be able to hold)."""
        return max(self.levels)

    @property
    def unit(self) -> str:
        """The unit of a restart's value under this workload's objective."""
        return OBJECTIVE_UNITS.get(self.objective, "tok/s")

    def at(self, level: int) -> Workload:
        """This workload at one load level (what one measurement of a multi-level restart runs)."""
        return dataclasses.replace(self, concurrency=int(level), aggregate=None, weights=())

    def combine(self, values: Sequence[float]) -> float:
        """One value from per-level ``values`` (in :attr:`levels` order), as :attr:`aggregate` declares."""
        if len(values) == 1:
            return float(values[0])
        if self.aggregate == "min":
            return float(min(values))
        weights = self.weights or (1.0,) * len(values)
        return float(sum(w * v for w, v in zip(weights, values)) / sum(weights))

    def level_value(self, passes_tok_s: Sequence[float], latency: Mapping[str, float]) -> float | None:
        """One level's value under the objective: mean tok/s, or goodput (``None`` when not measured)."""
        if self.objective == "goodput":
            value = latency.get("goodput")
            return None if value is None else float(value)
        return sum(passes_tok_s) / len(passes_tok_s) if passes_tok_s else None

    def scored(self, result: RestartResult) -> RestartResult:
        """``result`` with its value under this workload's objective (:attr:`RestartResult.score`).

        A multi-level restart's ``latency`` becomes the levels' combined figures (:func:`combine_latency`), so an
        SLO holds only when it holds at every level. A goodput that is missing or zero fails the restart with the
        reason: no request met the limits, and a zero has no place on the log scale every interval is built on
        (a cold first start, never counted, keeps its zero).
        """
        if not result.ok:
            return result
        latency = dict(result.latency)
        if result.levels:
            by_level = [self.level_value(lv.passes_tok_s, lv.latency) for lv in result.levels]
            latency = combine_latency([lv.latency for lv in result.levels], self)
        else:
            by_level = [self.level_value(result.passes_tok_s, result.latency)]
        if any(v is None for v in by_level):
            return dataclasses.replace(result, status=RestartStatus.FAILED, latency=latency,
                                       error="engine reported no goodput (it measures no per-request latency)")
        score = self.combine([float(v) for v in by_level])  # type: ignore[arg-type]
        if self.objective == "goodput" and score <= 0.0 and not result.cold:
            # (A cold first start is never counted: its slow requests say nothing, and the warm one runs next.)
            return dataclasses.replace(result, status=RestartStatus.FAILED, latency=latency, score=0.0,
                                       error="goodput 0 req/s: no request met every slo limit")
        return dataclasses.replace(result, latency=latency, score=score)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["concurrency"] = list(self.levels) if isinstance(self.concurrency, tuple) else self.concurrency
        out["dataset"] = None if self.dataset is None else self.dataset.to_dict()
        out["slo"] = dict(self.slo)
        # Left out at their defaults, so a single-level throughput study keeps the shape (and fingerprint) it had.
        for key, default in (("objective", "throughput"), ("aggregate", None), ("weights", ()), ("pass_seconds", 5.0)):
            if out[key] == default or (key == "weights" and not out[key]):
                del out[key]
            elif key == "weights":
                out[key] = list(self.weights)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        return cls(**dict(data))


def combine_latency(levels: Sequence[Mapping[str, float]], workload: Workload) -> dict[str, float]:
    """Several load levels' latency figures as one restart's: what an SLO and a report read.

    Percentiles (``*_ms``) are the worst level's, so a limit met here is met at every level; ``requests`` add up;
    rates (``request_throughput``, ``goodput``) combine as the workload's objective does. Only figures every level
    reports are kept.
    """
    if not levels:
        return {}
    keys = set.intersection(*(set(lv) for lv in levels))
    out: dict[str, float] = {}
    for key in sorted(keys):
        values = [float(lv[key]) for lv in levels]
        if key.endswith("_ms"):
            out[key] = max(values)
        elif key == "requests":
            out[key] = sum(values)
        else:
            out[key] = workload.combine(values)
    return out


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """One engine configuration, in vLLM's own names.

    ``engine_args`` are flat ``vllm serve`` / ``LLM(**kwargs)`` arguments with underscores (``max_num_seqs``);
    ``compilation_config`` holds only keys the search set (absent means "engine default");
    ``speculative_config`` is ``None`` when speculation is off.

    Attributes:
        engine_args: Fixed engine arguments (model, dtype, max_model_len, max_num_seqs, ...).
        compilation_config: e.g. ``{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4]}``.
        speculative_config: e.g. ``{"method": "ngram", "num_speculative_tokens": 3, ...}`` or ``None``.
        params: The searched parameters that produced this config (Optuna's names), for labels and plots.
        draft: Name of the space's draft option in use, or ``None``.
    """

    engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    compilation_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    speculative_config: Mapping[str, Any] | None = None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    draft: str | None = None

    def __post_init__(self) -> None:
        # One canonical K schedule, so equal schedules share a key and a label however they were written.
        object.__setattr__(self, "speculative_config", canonical_spec(self.speculative_config))

    # -- what the tuner looks at -------------------------------------------------------------------------
    @property
    def cudagraph_mode(self) -> str | None:
        """Configured cudagraph mode, ``None`` for the engine default."""
        return self.compilation_config.get("cudagraph_mode")

    @property
    def capture_sizes(self) -> tuple[int, ...] | None:
        """Configured capture sizes (sorted), ``None`` for the engine default."""
        sizes = self.compilation_config.get("cudagraph_capture_sizes")
        return None if sizes is None else tuple(sorted(int(s) for s in sizes))

    @property
    def num_speculative_tokens(self) -> int:
        """K, the draft tokens per step; 0 when speculation is off."""
        if not self.speculative_config:
            return 0
        return int(self.speculative_config.get("num_speculative_tokens", 0))

    @property
    def k_schedule(self) -> KSchedule | None:
        """K by batch size (``speculative_config.num_speculative_tokens_per_batch_size``), ``None`` for a fixed K."""
        return schedule_of(self.speculative_config)

    @property
    def spec_method(self) -> str | None:
        """The speculative method (``ngram``, ``draft_model``, ``eagle3``, ``mtp``...), ``None`` when off."""
        if not self.speculative_config:
            return None
        return self.speculative_config.get("method")

    def key(self) -> str:
        """A short stable identity: equal configs (whatever their params) share a key.

        Credentials do not take part (their values are redacted first), so a configuration and its stored,
        redacted copy share a key, and rotating a token does not make a configuration new.
        """
        body = _canonical_json(redact({
            "engine_args": self.engine_args,
            "compilation_config": self.compilation_config,
            "speculative_config": self.speculative_config,
        }))
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def label(self) -> str:
        """A one-line human name, e.g. ``PIECEWISE sizes=[4,8,16] ngram K=3``."""
        mode = self.cudagraph_mode or "default-mode"
        sizes = self.capture_sizes
        size_txt = "default-sizes" if sizes is None else f"sizes=[{','.join(map(str, sizes))}]"
        schedule = self.k_schedule
        if self.num_speculative_tokens:
            k = self.num_speculative_tokens if schedule is None else schedule.text()
            spec = f"{self.draft or self.spec_method} K={k}"
        else:
            spec = "no-spec"
        searched = "".join(f" {k}={self.engine_args[k]}" for k in self.searched_engine_args())
        return f"{mode} {size_txt} {spec}{searched}"

    def searched_engine_args(self) -> list[str]:
        """Engine arguments the search set (those among ``params`` that are ``engine_args``), in params order."""
        return [k for k in self.params if k in self.engine_args]

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM(**kwargs)`` (the one translation the runner and export share)."""
        kwargs: dict[str, Any] = dict(self.engine_args)
        if self.compilation_config:
            kwargs["compilation_config"] = dict(self.compilation_config)
        if self.speculative_config:
            kwargs["speculative_config"] = dict(self.speculative_config)
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine_args": dict(self.engine_args),
            "compilation_config": dict(self.compilation_config),
            "speculative_config": None if self.speculative_config is None else dict(self.speculative_config),
            "params": dict(self.params),
            "draft": self.draft,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineConfig:
        return cls(
            engine_args=dict(data.get("engine_args") or {}),
            compilation_config=dict(data.get("compilation_config") or {}),
            speculative_config=None if data.get("speculative_config") is None else dict(data["speculative_config"]),
            params=dict(data.get("params") or {}),
            draft=data.get("draft"),
        )


@dataclasses.dataclass(frozen=True)
class EngineFacts:
    """Which engine ran, as far as it knows: what tracking tags, reports and exports name.

    Attributes:
        name: Registry name (``sim``, ``cmd``, ``vllm``).
        version: The engine's version (vLLM's for ``vllm`` and ``sim``).
        gpu: Accelerator name.
        driver: GPU driver version.
        cuda: CUDA version.
        simulated: Every number comes from the simulator.
        extra: Other engine-specific facts (``mode``, ``command``, ``profile``, ...).
    """

    name: str | None = None
    version: str | None = None
    gpu: str | None = None
    driver: str | None = None
    cuda: str | None = None
    simulated: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    #: Stored name -> field; older studies and engines used the alternatives.
    _ALIASES = {
        "engine": "name", "engine_version": "version", "version": "version", "vllm": "version",
        "gpu": "gpu", "gpu_name": "gpu", "device": "gpu", "driver": "driver", "driver_version": "driver",
        "cuda": "cuda", "cuda_version": "cuda", "simulated": "simulated",
    }

    def to_dict(self) -> dict[str, Any]:
        """The stored shape: ``engine``, ``engine_version``, ``gpu``, ``driver``, ``cuda``, ``simulated`` (when
        true) and the extra facts; unknown facts are left out."""
        out: dict[str, Any] = {"engine": self.name, "engine_version": self.version, "gpu": self.gpu,
                               "driver": self.driver, "cuda": self.cuda}
        out = {k: v for k, v in out.items() if v is not None}
        if self.simulated:
            out["simulated"] = True
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    @classmethod
    def of(cls, facts: EngineFacts | Mapping[str, Any] | None) -> EngineFacts:
        """``facts`` as :class:`EngineFacts` (an engine outside this package may still describe itself as a dict)."""
        return facts if isinstance(facts, EngineFacts) else cls.from_dict(facts)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> EngineFacts:
        kw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in (data or {}).items():
            field = cls._ALIASES.get(key)
            if field is None:
                extra[key] = value
            elif value not in (None, "") and field not in kw:
                kw[field] = bool(value) if field == "simulated" else value if field == "name" else str(value)
        return cls(**kw, extra=extra)


def _normalise_mode(mode: Any) -> str | None:
    # vLLM prints enum members as "CUDAGraphMode.PIECEWISE"; compare on the bare name.
    if mode is None:
        return None
    return str(mode).rsplit(".", 1)[-1].upper()


def config_differences(config: EngineConfig, resolved: Resolved | None) -> list[Difference]:
    """Fields the engine resolved differently from what was configured.

    Fields the configuration set are compared with what ran. A field left to the engine has nothing to differ
    from, with one exception: a default capture mode that resolved to ``NONE`` (graphs silently off).
    """
    if resolved is None:
        return []
    diffs: list[Difference] = []
    want_mode = _normalise_mode(config.cudagraph_mode)
    got_mode = _normalise_mode(resolved.cudagraph_mode)
    if want_mode is not None and got_mode is not None and want_mode != got_mode:
        diffs.append(Difference("cudagraph_mode", want_mode, got_mode))
    elif want_mode is None and got_mode == "NONE":
        # The seed note's trap: nothing asked for eager execution, yet the engine turned graph capture off
        # (e.g. because speculation is on). An engine default is never "no graphs" on a GPU.
        diffs.append(Difference("cudagraph_mode", "default (graphs on)", got_mode))
    want_sizes = config.capture_sizes
    got_sizes = resolved.cudagraph_capture_sizes
    if want_sizes is not None and got_sizes is not None and tuple(sorted(got_sizes)) != want_sizes:
        diffs.append(Difference("cudagraph_capture_sizes", list(want_sizes), sorted(got_sizes)))
    # Searched engine arguments, where the engine reported what it ran (details["engine_args"]).
    reported = dict(resolved.details.get(Detail.ENGINE_ARGS) or {})
    for key in config.searched_engine_args():
        if key in reported and reported[key] is not None and reported[key] != config.engine_args[key]:
            diffs.append(Difference(key, config.engine_args[key], reported[key]))
    return diffs + schedule_differences(config.k_schedule, config.cudagraph_mode, resolved)


def speculation_plan_change(config: EngineConfig, resolved_mode: str | None,
                            mode_without_speculation: str | None) -> Difference | None:
    """The default capture mode that speculation changed: the seed note's trap in its most common form.

    A configuration that leaves ``cudagraph_mode`` to the engine and turns speculation on is compared with what
    the same defaults resolved to *without* speculation (``mode_without_speculation``, e.g. the baseline's).
    ``FULL_AND_PIECEWISE`` without speculation but ``PIECEWISE`` with it means the speculative trial ran with less
    graph coverage than its defaults promise, and nothing the user configured says so. ``None`` when the mode was
    configured, speculation is off, either side is unknown, or nothing changed. (Default *capture sizes* are left
    out: vLLM scales them with the number of draft tokens by design.)
    """
    if config.cudagraph_mode is not None or not config.num_speculative_tokens:
        return None
    got, reference = _normalise_mode(resolved_mode), _normalise_mode(mode_without_speculation)
    if got is None or reference is None or got == reference:
        return None
    return Difference("cudagraph_mode", f"default ({reference} without speculation)", got)


@dataclasses.dataclass(frozen=True)
class LevelResult:
    """One load level of a multi-level restart: the level's timed passes and request latencies.

    Attributes:
        concurrency: Requests in flight at this level.
        passes_tok_s: Output tokens/s of each timed pass at this level.
        latency: Request latencies at this level (the keys of :attr:`RestartResult.latency`).
    """

    concurrency: int
    passes_tok_s: tuple[float, ...] = ()
    latency: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def tok_s(self) -> float | None:
        """The level's mean output tokens/s."""
        return sum(self.passes_tok_s) / len(self.passes_tok_s) if self.passes_tok_s else None

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "passes_tok_s": list(self.passes_tok_s), "latency": dict(self.latency)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LevelResult:
        return cls(int(data["concurrency"]), tuple(float(x) for x in data.get("passes_tok_s") or ()),
                   {str(k): float(v) for k, v in dict(data.get("latency") or {}).items() if v is not None})


@dataclasses.dataclass(frozen=True)
class RestartResult:
    """One restart: a fresh engine process started, warmed up and timed.

    A failure is data, not an exception: ``status`` says what happened and ``error`` why.

    Attributes:
        status: One of :class:`RestartStatus` (``ok``, ``failed``, ``timeout``).
        restart: Restart index within its trial or verification round.
        seed: The restart's seed; configs are compared on matched seeds.
        passes_tok_s: Output tokens/s of each timed pass (warm-up excluded).
        passes_s: Seconds each timed pass lasted (empty when the engine does not say).
        warmup_tok_s: Output tokens/s of each warm-up pass (recorded, never counted).
        startup_s: Seconds from process start to engine ready.
        start_method: How the engine process was started (the ``vllm`` engine: ``forkserver`` or ``spawn``).
        wall_s: Engine wall time of the whole restart, start-up included (what a budget counts).
        resolved: What the engine ran (``None`` if it died before saying).
        accept_len: Mean acceptance length (1 + accepted drafts per step) when speculating.
        cold: True for the first start of a configuration (empty compile caches): recorded, not counted.
        peak_memory_gib: Peak accelerator memory, when known.
        error: One-line failure reason.
        log_path: Where the engine's log is, when there is one.
        log_tail: The last lines of the engine log on failure.
        latency: Request latencies over the timed passes, flat: ``ttft_p50_ms`` ... ``e2el_p99_ms`` (see
            :func:`latency_key`), ``request_throughput`` (requests/s), ``goodput`` (requests/s meeting every
            ``workload.slo`` limit, when there are limits) and ``requests``; empty when the engine does not say.
            With several load levels, the levels' combined figures (:func:`combine_latency`).
        levels: With several load levels, each level's passes and latency (``passes_tok_s`` then holds every
            level's timed passes in level order); empty for one level.
        score: The restart's value under the study's objective (:meth:`Workload.scored`); ``None`` leaves
            :attr:`value` to the mean output tok/s.
        facts: What the restart measured besides throughput, flat (memory, KV capacity, machine state, phases, the
            output check); keys are named in :mod:`autotune.core.facts`. Empty when the engine says nothing.
    """

    status: str
    restart: int = 0
    seed: int = 0
    passes_tok_s: tuple[float, ...] = ()
    warmup_tok_s: tuple[float, ...] = ()
    passes_s: tuple[float, ...] = ()
    startup_s: float | None = None
    wall_s: float | None = None
    resolved: Resolved | None = None
    accept_len: float | None = None
    cold: bool = False
    peak_memory_gib: float | None = None
    error: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    start_method: str | None = None
    latency: Mapping[str, float] = dataclasses.field(default_factory=dict)
    levels: tuple[LevelResult, ...] = ()
    score: float | None = None
    facts: Mapping[str, FactValue] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # A phase, start-up, latency or memory no restart can have (core/plausible.py) is a failure too; the
        # absurd phase is dropped whatever the status, so no budget prices it.
        odd = implausible(startup_s=self.startup_s, peak_memory_gib=self.peak_memory_gib, accept_len=self.accept_len,
                          latency=self.latency, facts=dict(self.facts or {}))
        object.__setattr__(self, "facts", clean_facts(plausible_facts(dict(self.facts or {}))))
        if self.status not in RestartStatus.ALL:
            raise ValueError(f"status must be one of {RestartStatus.ALL}, got {self.status!r}")
        if self.status == RestartStatus.OK:
            # The engine boundary: whatever an engine (or an old study record) says, an impossible throughput is a
            # failed restart with the reason, never a number that reaches a mean, a ratio or a verdict.
            problem = throughput_problem(self.passes_tok_s) or odd
            if problem is not None:
                object.__setattr__(self, "status", RestartStatus.FAILED)
                object.__setattr__(self, "error", f"engine reported {problem}")

    @property
    def ok(self) -> bool:
        return self.status == RestartStatus.OK and bool(self.passes_tok_s)

    @property
    def value(self) -> float | None:
        """The restart's value: its :attr:`score` under the study's objective, else the mean tok/s of its passes."""
        if not self.ok:
            return None
        if self.score is not None:
            return self.score
        return sum(self.passes_tok_s) / len(self.passes_tok_s)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["passes_tok_s"] = list(self.passes_tok_s)
        out["warmup_tok_s"] = list(self.warmup_tok_s)
        out["passes_s"] = list(self.passes_s)
        if not self.passes_s:
            del out["passes_s"]
        out["resolved"] = None if self.resolved is None else self.resolved.to_dict()
        out["latency"] = dict(self.latency)
        out["levels"] = [lv.to_dict() for lv in self.levels]
        if not self.levels:
            del out["levels"]
        if self.score is None:
            del out["score"]
        out["facts"] = dict(self.facts)
        if not self.facts:
            del out["facts"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RestartResult:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["passes_tok_s"] = tuple(float(x) for x in data.get("passes_tok_s") or ())
        kwargs["warmup_tok_s"] = tuple(float(x) for x in data.get("warmup_tok_s") or ())
        kwargs["passes_s"] = tuple(float(x) for x in data.get("passes_s") or ())
        kwargs["resolved"] = Resolved.from_dict(data.get("resolved"))
        kwargs["latency"] = {str(k): float(v) for k, v in dict(data.get("latency") or {}).items() if v is not None}
        kwargs["levels"] = tuple(LevelResult.from_dict(lv) for lv in data.get("levels") or ())
        kwargs["score"] = None if data.get("score") is None else float(data["score"])
        kwargs["facts"] = clean_facts(data.get("facts") if isinstance(data.get("facts"), Mapping) else None)
        return cls(**kwargs)

    @classmethod
    def failure(cls, status: str, error: str, **kwargs: Any) -> RestartResult:
        """A failed or timed-out restart with a one-line reason."""
        first_line = (error or "unknown error").strip().splitlines()[0] if error and error.strip() else "unknown error"
        return cls(status=status, error=first_line, **kwargs)

