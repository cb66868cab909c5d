"""Study plots as PNG files: optimisation history, parameter importances, mode x K, winner vs baseline,
throughput against p99 TPOT with the Pareto front.

Optuna's own matplotlib visualisations draw the first two; the last two are autotune's, because they show
what Optuna does not know about: per-restart intervals and the verification phase. Every function returns a
matplotlib ``Figure`` or raises :class:`PlotSkipped` with a one-line reason (too few trials, no verification),
so a small study loses a plot, never the study.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

# Studies run on headless GPU boxes and in CI: never try to open a display. Only when pyplot is not loaded
# yet, so an interactive session that imported pyplot first keeps its backend.
if "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from autotune.core.confine import open_confined  # noqa: E402
from autotune.core.escape import plot_text  # noqa: E402

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

    from autotune.store.ledger import Ledger, TrialRecord
    from autotune.report._report import Report

__all__ = [
    "PLOT_FILES",
    "PlotSkipped",
    "optimization_history",
    "param_importances",
    "save_study_plots",
    "pareto_front",
    "throughput_by_mode_and_k",
    "throughput_vs_latency",
    "winner_vs_baseline",
]

#: Plot name -> PNG file name, in the order they are drawn.
PLOT_FILES = {
    "optimization_history": "optimization_history.png",
    "param_importances": "param_importances.png",
    "throughput_by_mode_and_k": "throughput_by_mode_and_k.png",
    "winner_vs_baseline": "winner_vs_baseline.png",
    "throughput_vs_latency": "throughput_vs_latency.png",
}
#: x-axis order for cudagraph modes: the engine default first, then vLLM's own order.
_MODE_ORDER = ("default", "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
_OBJECTIVE = "output tok/s (mean over restarts)"
#: The axis label of a study's value, by its unit (the objective's: throughput or goodput).
_OBJECTIVE_LABELS = {"tok/s": _OBJECTIVE, "req/s": "goodput, req/s meeting the SLO (mean over restarts)"}


def _objective_label(unit: str) -> str:
    return _OBJECTIVE_LABELS.get(unit, _OBJECTIVE)


class PlotSkipped(Exception):
    """A plot cannot be drawn for this study; the message says why in one line."""


def _optuna_figure(draw: Any, study: optuna.Study, **kwargs: Any) -> Figure:
    """Run one of Optuna's matplotlib plot functions quietly and return its figure."""
    import optuna

    with warnings.catch_warnings():
        # Optuna marks its matplotlib backend experimental; the warning says nothing to an autotune user.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # PED-ANOVA warns about regimes with fewer than 2 trials (conditional drafts): expected in small studies.
        warnings.simplefilter("ignore", UserWarning)
        ax = draw(study, **kwargs)
    fig = ax.figure
    fig.set_size_inches(8, 5)
    fig.tight_layout()
    return fig


def _complete_count(study: optuna.Study) -> int:
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def optimization_history(study: optuna.Study, unit: str = "tok/s") -> Figure:
    """Each complete trial's mean throughput and the best so far (Optuna's optimisation history).

    Raises:
        PlotSkipped: no complete trial yet.
    """
    from optuna.visualization.matplotlib import plot_optimization_history

    if _complete_count(study) == 0:
        raise PlotSkipped("no complete trial yet")
    return _optuna_figure(plot_optimization_history, study, target_name=_objective_label(unit))


def param_importances(study: optuna.Study, unit: str = "tok/s") -> Figure:
    """How much each searched parameter explains the throughput (Optuna's default importance evaluator).

    Raises:
        PlotSkipped: fewer than two complete trials, or the evaluator cannot fit this study.
    """
    from optuna.visualization.matplotlib import plot_param_importances

    complete = _complete_count(study)
    if complete < 2:
        raise PlotSkipped(f"parameter importances need at least 2 complete trials, the study has {complete}")
    try:
        return _optuna_figure(plot_param_importances, study, target_name=_objective_label(unit))
    except Exception as exc:  # noqa: BLE001 - the evaluator fails in many small-study ways; none is fatal
        plt.close("all")
        raise PlotSkipped(f"parameter importances unavailable: {_one_line(exc)}") from None


def _best_per_cell(records: Sequence[TrialRecord]) -> dict[tuple[str, int], Any]:
    """The best complete trial of each (cudagraph mode, K) cell; capture sizes and drafts collapse into it."""
    best: dict[tuple[str, int], Any] = {}
    for r in records:
        s = r.summary
        if r.state != "COMPLETE" or r.duplicate_of is not None or s is None or s.n == 0 or math.isnan(s.mean):
            continue
        cell = (r.config.cudagraph_mode or "default", r.config.num_speculative_tokens)
        if cell not in best or s.mean > best[cell].summary.mean:
            best[cell] = r
    return best


def throughput_by_mode_and_k(records: Sequence[TrialRecord], baseline_key: str | None = None,
                             unit: str = "tok/s") -> Figure:
    """Bars: the best search mean of each cudagraph mode x K, with its confidence interval over restarts.

    Args:
        records: The study's trial records.
        baseline_key: The baseline configuration's key; its search mean is drawn as a dashed line.

    Raises:
        PlotSkipped: no complete trial.
    """
    best = _best_per_cell(records)
    if not best:
        raise PlotSkipped("no complete trial yet")
    modes = [m for m in _MODE_ORDER if any(c[0] == m for c in best)]
    modes += sorted({c[0] for c in best} - set(modes))
    ks = sorted({c[1] for c in best})
    width = 0.8 / len(ks)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.6 * len(modes) + 2), 5))
    for j, k in enumerate(ks):
        xs, means, err_low, err_high = [], [], [], []
        for i, mode in enumerate(modes):
            rec = best.get((mode, k))
            if rec is None:
                continue
            s = rec.summary
            xs.append(i - 0.4 + width * (j + 0.5))
            means.append(s.mean)
            # A single restart has no interval: draw the bar without whiskers rather than a fake one.
            err_low.append(0.0 if math.isnan(s.ci_low) else s.mean - s.ci_low)
            err_high.append(0.0 if math.isnan(s.ci_high) else s.ci_high - s.mean)
        ax.bar(xs, means, width=width * 0.95, yerr=[err_low, err_high], capsize=3,
               label="K=0 (no speculation)" if k == 0 else f"K={k}")
    base = next((r.summary for r in records if baseline_key and r.config.key() == baseline_key
                 and r.summary is not None and r.summary.n and not math.isnan(r.summary.mean)), None)
    if base is not None:
        ax.axhline(base.mean, color="black", linestyle="--", linewidth=1, label="baseline (engine defaults)")
    ax.set_xticks(range(len(modes)), [plot_text(m) for m in modes], rotation=15)
    ax.set_xlabel("compilation_config.cudagraph_mode (best capture sizes / draft per cell)")
    ax.set_ylabel(_objective_label(unit))
    what = "Throughput" if unit == "tok/s" else "Goodput"
    ax.set_title(f"{what} by cudagraph mode x speculative tokens K (95% CI over restarts)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def winner_vs_baseline(report: Report) -> Figure:
    """The verified winner and the baseline, restart by restart (matched seeds), with their intervals.

    Raises:
        PlotSkipped: the study has no verification yet.
    """
    winner, baseline = report.winner, report.baseline
    if winner is None or baseline is None:
        raise PlotSkipped("no verification yet")
    fig, ax = plt.subplots(figsize=(8, 5))
    entries = [("baseline", baseline)] if report.winner_is_baseline else [("winner", winner), ("baseline", baseline)]
    for name, entry in entries:
        values = list(entry.values)
        line = ax.plot(range(len(values)), values, marker="o", label=plot_text(f"{name}: {entry.label}"))[0]
        if entry.ci_low is not None and entry.ci_high is not None:
            ax.axhspan(entry.ci_low, entry.ci_high, color=line.get_color(), alpha=0.15)
    title = "Verification: fresh interleaved restarts"
    speedup = winner.speedup
    if speedup is not None and not report.winner_is_baseline:
        title += "\n" + plot_text(f"speedup {speedup.oneliner()} - {report.verdict or speedup.verdict}")
    ax.set_title(title)
    ax.set_xlabel("verification round (same seed for every configuration)")
    ax.set_ylabel("output tok/s" if report.unit == "tok/s" else "goodput, req/s meeting the SLO")
    locator = ax.xaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # the default AutoLocator is one
        locator.set_params(integer=True)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both counts: higher throughput (x) and lower latency (y)."""
    front = []
    for i, (tok_s, lat) in enumerate(points):
        dominated = any(t >= tok_s and l <= lat and (t > tok_s or l < lat) for j, (t, l) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def throughput_vs_latency(report: Report, latency_key: str = "tpot_p99_ms") -> Figure:
    """Every measured trial's throughput against its p99 TPOT, the Pareto front marked, the SLO limit drawn.

    Raises:
        PlotSkipped: no trial reported latency.
    """
    rows = [(r, r.mean_tok_s) for r in report.search_latency if r.mean_tok_s is not None and latency_key in r.latency]
    if not rows:
        raise PlotSkipped(f"no trial reported {latency_key}")
    points = [(float(tok_s), float(r.latency[latency_key])) for r, tok_s in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    missed = [bool(r.slo_failed) for r, _ in rows]
    for flag, colour, name in ((False, "tab:blue", "meets the SLOs" if report.slo else "trial"),
                               (True, "tab:red", "misses an SLO")):
        xs = [p[0] for p, m in zip(points, missed) if m == flag]
        ys = [p[1] for p, m in zip(points, missed) if m == flag]
        if xs:
            ax.scatter(xs, ys, color=colour, alpha=0.7, label=name)
    front = pareto_front(points)
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color="black", marker="D",
            linestyle="--", label="Pareto front (more tok/s, less latency)")
    limit = report.slo.get(latency_key)
    if limit is not None:
        ax.axhline(limit, color="tab:red", linestyle=":", label=f"SLO {latency_key} <= {limit:g}")
    ax.set_xlabel(_OBJECTIVE)
    ax.set_ylabel(f"{latency_key.replace('_ms', '')} (ms, mean over restarts)")
    ax.set_title("Throughput against latency, one point per search trial")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def save_study_plots(ledger: Ledger, report: Report,
                     out_dir: str | Path) -> tuple[list[Path], dict[str, str]]:
    """Draw every plot that this study supports into ``out_dir``.

    Args:
        ledger: The study.
        report: Its :class:`~autotune.report._report.Report`.
        out_dir: Directory for the PNG files (created if missing).

    Returns:
        ``(written, skipped)``: the PNG paths written, and plot name -> one-line reason for those skipped.
    """
    study = ledger.study
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = ledger.trial_records()
    baseline = report.meta.baseline
    baseline_key = None if baseline is None else baseline.key()
    draw: dict[str, Callable[[], Figure]] = {
        "optimization_history": lambda: optimization_history(study, report.unit),
        "param_importances": lambda: param_importances(study, report.unit),
        "throughput_by_mode_and_k": lambda: throughput_by_mode_and_k(records, baseline_key, report.unit),
        "winner_vs_baseline": lambda: winner_vs_baseline(report),
        "throughput_vs_latency": lambda: throughput_vs_latency(report),
    }
    written: list[Path] = []
    skipped: dict[str, str] = {}
    for name, make in draw.items():
        try:
            fig = make()
        except PlotSkipped as exc:
            skipped[name] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - one broken plot must not cost the others
            skipped[name] = f"plot failed: {_one_line(exc)}"
            plt.close("all")
            continue
        path = out / PLOT_FILES[name]
        try:
            with open_confined(out, PLOT_FILES[name], "wb") as fh:  # never through a link put in the directory
                fig.savefig(fh, dpi=110, format="png")
        except OSError as exc:
            skipped[name] = f"plot not written: {_one_line(exc)}"
            continue
        finally:
            plt.close(fig)
        written.append(path)
    return written, skipped
