"""The report's workload and latency part: what the prompts were, latency per configuration, the SLO outcome.

:func:`autotune.report._build.build_report` fills these into the typed :class:`~autotune.report._report.Report`:

* :class:`Prompts`: the dataset the study ran and, for a real engine on synthetic token ids, a warning:
  speculative decoding's acceptance (prompt lookup above all) on repeated or random tokens says little about real
  traffic;
* :class:`TrialLatency`: every search trial's throughput and latency (the points of the throughput-vs-latency plot);
* :class:`SloOutcome`: which verified configurations missed which limit, and whether the winner and the baseline
  met the same limits.

:func:`render_latency` adds the text lines; each verified row carries its own latency and SLO checks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.records import decode, record
from autotune.store.ledger import Ledger, StudyMeta
from autotune.stats.latency import SloCheck
from autotune.core.records import Dataset, Workload
from autotune.config.workload import default_dataset

__all__ = ["Prompts", "SloOutcome", "TrialLatency", "prompts_note", "render_latency", "search_latency",
           "slo_outcome"]

#: The latency figures the text report shows per configuration (all of them are in the JSON).
SHOWN = ("ttft_p99_ms", "tpot_p99_ms", "e2el_p99_ms")


@record(emits={"description": "dataset.describe"}, after={"description": "dataset"})
@dataclasses.dataclass(frozen=True)
class Prompts:
    """The prompts a study ran, and a warning when a real engine ran synthetic ones."""

    dataset: Dataset
    synthetic: bool
    repetitive: bool
    warning: str | None = None


@dataclasses.dataclass(frozen=True)
class TrialLatency:
    """One measured search trial: its throughput and its latency (means over counted restarts)."""

    trial: int
    label: str | None
    state: str
    mean_tok_s: float | None
    latency: Mapping[str, float]
    slo_failed: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MissedLimits:
    """One verified configuration's limits that it missed, as report --json lists them."""

    label: str
    role: str
    missed: tuple[SloCheck, ...]


@record(leaves_out=("missed",), emits={"missed": "missed_limits"}, after={"missed": None})
@dataclasses.dataclass(frozen=True)
class SloOutcome:
    """The verified configurations against the study's limits."""

    missed: tuple[tuple[str, str, tuple[SloCheck, ...]], ...]
    any_met: bool
    baseline_meets: bool
    winner_meets: bool

    @property
    def missed_limits(self) -> tuple[MissedLimits, ...]:
        return tuple(MissedLimits(label, role, checks) for label, role, checks in self.missed)


def prompts_note(meta: StudyMeta) -> Prompts:
    """What the study's prompts were (the ``vllm`` engine decides a missing dataset from the model's arguments)."""
    workload = decode(Workload, meta.workload) if meta.workload else Workload()
    dataset = workload.dataset
    if dataset is None:
        engine_args = {} if meta.baseline is None else dict(meta.baseline.engine_args)
        dataset = default_dataset(engine_args) if meta.engine.name == "vllm" else Dataset("synthetic")
    synthetic = not dataset.is_text
    repetitive = synthetic and workload.repetitive_prompts
    warning = None
    if synthetic and not meta.engine.simulated:
        kind = "repeated n-gram" if repetitive else "random"
        warning = (f"this real engine was tuned on synthetic {kind} token-id prompts: speculative decoding's "
                   "acceptance (prompt lookup above all) on them says little about real traffic; set "
                   "workload.dataset to your prompts (or drop it for autotune's shipped prompts)")
    return Prompts(dataset, synthetic, repetitive, warning)


def search_latency(ledger: Ledger) -> tuple[TrialLatency, ...]:
    """Every measured search trial with latency, in trial order (repeats left out)."""
    out = []
    for t in ledger.study.get_trials(deepcopy=False):
        latency = ledger.latency(t)
        if not latency or ledger.is_duplicate(t):
            continue
        # Output tok/s whatever the objective (under goodput a trial's value is requests/s): the plot's axis.
        passes = [sum(r.passes_tok_s) / len(r.passes_tok_s) for r in ledger.restarts(t) if r.ok and not r.cold]
        mean = sum(passes) / len(passes) if passes else None
        out.append(TrialLatency(t.number, ledger.label(t), t.state.name, mean,
                                {k: v.mean for k, v in latency.items()},
                                tuple(c.key for c in ledger.slo_checks(t) if c.fails)))
    return tuple(out)


def slo_outcome(rows: Sequence[Any], winner: Any, baseline: Any,
                slo: Mapping[str, float]) -> SloOutcome | None:
    """The verified rows (:class:`~autotune.report._report.VerifiedRow`) against the limits; ``None`` without limits."""
    if not slo:
        return None
    missed = tuple((r.label, r.role, tuple(c for c in r.slo_checks if c.fails)) for r in rows if not r.meets_slo)
    return SloOutcome(missed, any(r.meets_slo and r.status == "ok" for r in rows), baseline.meets_slo,
                      winner.meets_slo)


def _fmt_latency(row: Any) -> str:
    return ", ".join(f"{key.replace('_ms', '')} {row.latency[key].mean:.1f} ms" for key in SHOWN
                     if key in row.latency and not math.isnan(row.latency[key].mean))


def _check_text(check: SloCheck) -> str:
    if check.mean is None:
        return f"{check.key} not measured"
    if check.mean > check.limit_ms:
        return f"{check.key} {check.mean:.1f} > {check.limit_ms:g}"
    return f"{check.key} {check.mean:.1f} (interval above {check.limit_ms:g})"


def render_latency(report: Any) -> list[str]:
    """Text lines for a :class:`~autotune.report._report.Report`: the limits, each verified configuration's latency and
    SLO outcome, the prompts warning."""
    lines: list[str] = []
    if report.slo and report.objective == "goodput":
        limits = ", ".join(f"{k.split('_p', 1)[0]} <= {v:g} ms" for k, v in sorted(report.slo.items()))
        lines += ["", f"Objective: goodput, requests/s whose own {limits} (each request judged on its own "
                      "latency; the percentiles below are shown, not enforced)"]
    elif report.slo:
        limits = ", ".join(f"{k} <= {v:g}" for k, v in sorted(report.slo.items()))
        lines += ["", f"Objective: {report.objective} subject to {limits} "
                      "(a configuration whose latency misses a limit cannot win)"]
    rows = [] if report.verification is None else [e for e in report.verification.entries if e.latency]
    if rows:
        width = max(len(e.label) for e in rows)
        lines.append("")
        lines.append(f"{'':10}{'configuration':<{width}}  latency (mean over restarts of each restart's percentile)")
        for e in rows:
            status = ""
            if report.slo and report.objective != "goodput":
                failed = [c for c in e.slo_checks if c.fails]
                close = [c.key for c in e.slo_checks if c.status == "uncertain" and not c.fails]
                status = ("  MISSES " + "; ".join(map(_check_text, failed)) if failed
                          else "  meets the SLOs" + (f" (close: {', '.join(close)})" if close else ""))
            lines.append(f"{'baseline' if e.is_baseline else '':<10}{e.label:<{width}}  {_fmt_latency(e)}{status}")
    outcome = report.slo_outcome
    if outcome is not None:
        if not outcome.any_met:
            lines.append("SLO verdict: no verified configuration met the limits, the baseline included: relax the "
                         "limits or widen the search; nothing here is fit to deploy under them.")
        elif not outcome.baseline_meets:
            lines.append("SLO verdict: the baseline itself misses the limits, so the speedup compares the winner "
                         "with a configuration you could not deploy under them.")
        else:
            lines.append("SLO verdict: winner and baseline both meet the limits; the speedup compares them under "
                         "the same SLOs.")
    if report.slo and report.objective != "goodput":
        failed_trials = [s for s in report.search_latency if s.slo_failed]
        if failed_trials:
            keys = sorted({k for s in failed_trials for k in s.slo_failed})
            lines.append(f"Search: {len(failed_trials)} of {len(report.search_latency)} measured trials missed a "
                         f"limit ({', '.join(keys)}).")
    if report.prompts is not None and report.prompts.warning:
        lines += ["", f"WARNING: {report.prompts.warning}."]
    return lines
