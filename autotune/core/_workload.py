"""What one timed pass runs (:class:`Workload`, its prompts' :class:`Dataset`), the objective a restart is scored
by, and the latency names every engine reports. Public through :mod:`autotune.core.records`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core._restart import RestartStatus
from autotune.records import decode, record

if TYPE_CHECKING:
    from autotune.core._restart import RestartResult



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


@record(pairs=("args",))
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


#: Left out at their defaults, so a single-level throughput study keeps the shape (and fingerprint) it had.
@record(omit_at_default=("objective", "aggregate", "weights", "pass_seconds"), pairs=("slo",))
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
        # Accept the JSON shapes too (``Workload(**encode(workload))``); stored as hashable records.
        if isinstance(self.concurrency, (list, tuple)):
            levels = tuple(int(c) for c in self.concurrency)
            object.__setattr__(self, "concurrency", levels[0] if len(levels) == 1 else levels)
        if not isinstance(self.weights, tuple):
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if isinstance(self.dataset, Mapping):
            object.__setattr__(self, "dataset", decode(Dataset, self.dataset))
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
        values = [float(v) for v in by_level if v is not None]
        if len(values) < len(by_level):
            return dataclasses.replace(result, status=RestartStatus.FAILED, latency=latency,
                                       error="engine reported no goodput (it measures no per-request latency)")
        score = self.combine(values)
        if self.objective == "goodput" and score <= 0.0 and not result.cold:
            # (A cold first start is never counted: its slow requests say nothing, and the warm one runs next.)
            return dataclasses.replace(result, status=RestartStatus.FAILED, latency=latency, score=0.0,
                                       error="goodput 0 req/s: no request met every slo limit")
        return dataclasses.replace(result, latency=latency, score=score)


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
