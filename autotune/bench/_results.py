"""What a benchmark run shows: issue 9's targets, the table, the regret plot and one MLflow run."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from autotune.core.urls import sqlite_path


DEFAULT_OUT = "bench-out"
MLFLOW_EXPERIMENT = "autotune/bench"


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


# -- targets ---------------------------------------------------------------------------------------------


def _cell(summary: Sequence[Mapping[str, Any]], profile: str, strategy: str, budget: int) -> Mapping[str, Any] | None:
    return next((r for r in summary if (r["profile"], r["strategy"], r["budget"]) == (profile, strategy, budget)),
                None)


#: Issue 9's regret targets of autotune per budget, (median, p90), on :data:`ABSOLUTE_PROFILES`.
REGRET_TARGETS = {30: (0.02, 0.10), 60: (0.01, 0.05)}
#: Profiles held to :data:`REGRET_TARGETS` (the issue names them).
ABSOLUTE_PROFILES = ("gb10", "h200")
#: Profiles held to the relative and coverage targets: the named ones and the held-out random landscapes.
RELATIVE_PROFILES = ("gb10", "h200", "random")
#: Budgets at which autotune's mean regret must be below every other strategy's (a tie at 0.0% passes).
RELATIVE_BUDGETS = (30, 60, 120)
#: Least coverage of the winner's throughput interval and of the verdict's speedup interval.
COVERAGE_TARGET = 0.90
#: Most "faster" verdicts on the flat profile (all of them false).
FALSE_WIN_TARGET = 0.05


def check_targets(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Issue 9's targets ("Done when"), checked where the benchmark covered them.

    On ``gb10`` and ``h200``: autotune's median and p90 regret within :data:`REGRET_TARGETS`. On those and on
    ``random``: autotune's mean regret below every other strategy's at 30, 60 and 120 starts (a tie at 0.0%
    passes), and the coverage of its throughput and speedup intervals >= 90% at every budget. On ``flat``:
    "faster" in at most 5% of runs.
    """
    checks: list[dict[str, Any]] = []

    def add(name: str, value: Any, ok: bool) -> None:
        checks.append({"target": name, "value": value, "ok": bool(ok)})

    profiles = list(dict.fromkeys(r["profile"] for r in summary))
    for profile in (p for p in profiles if p in RELATIVE_PROFILES):
        for budget in sorted({r["budget"] for r in summary if r["profile"] == profile}):
            mine = _cell(summary, profile, "autotune", budget)
            if mine is None:
                continue
            if profile in ABSOLUTE_PROFILES and budget in REGRET_TARGETS:
                med, p90 = REGRET_TARGETS[budget]
                add(f"{profile} autotune median regret at {budget} <= {med:.0%}", mine["median_regret"],
                    mine["median_regret"] <= med)
                add(f"{profile} autotune p90 regret at {budget} <= {p90:.0%}", mine["p90_regret"],
                    mine["p90_regret"] <= p90)
            others = [r for r in summary if r["profile"] == profile and r["budget"] == budget
                      and r["strategy"] != "autotune"]
            if others and budget in RELATIVE_BUDGETS:
                best = min(others, key=lambda r: r["mean_regret"])
                value = {"autotune": mine["mean_regret"], "best_other": best["mean_regret"],
                         "other": best["strategy"]}
                tie_at_zero = mine["mean_regret"] == 0.0 and best["mean_regret"] == 0.0
                add(f"{profile} autotune mean regret at {budget} below every other strategy", value,
                    mine["mean_regret"] < best["mean_regret"] or tie_at_zero)
            for key, what in (("coverage", "throughput"), ("speedup_coverage", "speedup")):
                if mine.get(key) is not None:
                    add(f"{profile} autotune {what}-interval coverage at {budget} >= {COVERAGE_TARGET:.0%}",
                        mine[key], mine[key] >= COVERAGE_TARGET)
    for r in summary:
        if r["profile"] == "flat" and r["strategy"] == "autotune":
            add(f"flat autotune says faster at {r['budget']} <= {FALSE_WIN_TARGET:.0%}", r["claim_rate"],
                r["claim_rate"] <= FALSE_WIN_TARGET)
    return checks


# -- output ----------------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value * 100:.1f}%"


def render_table(result: Mapping[str, Any]) -> str:
    """The benchmark table: one line per profile, budget and strategy."""
    header = (f"{'profile':<8}{'budget':>7}  {'strategy':<10}{'mean':>7}{'median':>8}{'p90':>7}"
              f"{'CI cov':>8}{'xCI cov':>9}{'faster':>9}{'starts':>8}{'configs':>9}{'found':>7}")
    lines = ["regret of the pick: mean / median / p90; coverage of the winner's throughput interval (CI cov) and of",
             "the verdict's speedup interval when the winner is not the baseline (xCI cov); how often the user is told",
             "'faster'; engine starts used; distinct configurations that got an engine start; found: mean regret of",
             "the best configuration that got an engine start (what the search reached, whatever it picked)", "",
             header, "-" * len(header)]
    previous = None
    for r in result["summary"]:
        if previous is not None and r["profile"] != previous:
            lines.append("")
        previous = r["profile"]
        claims = _pct(r["claim_rate"]) + ("*" if r["profile"] == "flat" else " ")
        lines.append(f"{r['profile']:<8}{r['budget']:>7}  {r['strategy']:<10}{_pct(r['mean_regret']):>7}"
                     f"{_pct(r['median_regret']):>8}{_pct(r['p90_regret']):>7}{_pct(r['coverage']):>8}"
                     f"{_pct(r.get('speedup_coverage')):>9}{claims:>9}{r['mean_restarts_used']:>8.1f}"
                     f"{r.get('mean_distinct', 0.0):>9.1f}{_pct(r['mean_found']):>7}")
    if any(r["profile"] == "flat" for r in result["summary"]):
        lines.append("* flat: no configuration is more than 1% faster than the baseline, so every 'faster' is false")
    return "\n".join(lines)


def render_targets(result: Mapping[str, Any]) -> str:
    """One line per target: PASS/MISS and the numbers behind it."""
    lines = []
    for check in result["targets"]:
        value = check["value"]
        if isinstance(value, dict):
            text = f"autotune {_pct(value['autotune'])}, best other {_pct(value['best_other'])} ({value['other']})"
        else:
            text = _pct(value)
        lines.append(f"  {'PASS' if check['ok'] else 'MISS'}  {check['target']}: {text}")
    return "\n".join(lines)


def render_header(result: Mapping[str, Any]) -> str:
    """What was run, and each profile's ground truth."""
    cfg = result["config"]
    seeds = f"seeds {cfg['first_seed']}-{cfg['first_seed'] + cfg['seeds'] - 1}"
    lines = [f"autotune bench: {seeds} x budgets {list(cfg['budgets'])} engine starts x "
             f"{len(cfg['strategies'])} strategies (autotune's sampler: {cfg.get('sampler', 'tpe')}), "
             f"{result['wall_s']:.0f} s wall on {cfg['jobs']} processes"
             + (f"; drifting machine: {cfg['drift']}" if cfg.get("drift", "off") != "off" else "")]
    for name, t in result["truth"].items():
        if t.get("per_seed"):
            lines.append(f"  {name}: {t['n_configs']} configurations; a landscape drawn per seed; baseline "
                         f"{t['baseline_over_best'] * 100:.1f}% of best on average")
            continue
        lines.append(f"  {name}: {t['n_configs']} configurations; true best {t['best']:.1f} tok/s "
                     f"({t['best_label']}); baseline {t['baseline']:.1f} tok/s = {t['baseline_over_best'] * 100:.1f}%"
                     f" of best")
    return "\n".join(lines)


def _cell_values(result: Mapping[str, Any], profile: str, strategy: str, budget: int, key: str) -> list[float]:
    """``key`` of every run in one (profile, strategy, budget) cell, as floats."""
    cell = (profile, strategy, budget)
    return [float(r[key]) for r in result["runs"] if (r["profile"], r["strategy"], r["budget"]) == cell]


def plot_regret(result: Mapping[str, Any], path: str | os.PathLike[str] | IO[bytes]) -> None:
    """A PNG per profile: median regret (25-75% band) against budget, and how often each strategy says "faster"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profiles = list(result["truth"])
    fig, axes = plt.subplots(2, len(profiles), figsize=(4.6 * len(profiles), 7.0), squeeze=False, sharex=True)
    for col, profile in enumerate(profiles):
        budgets = sorted({r["budget"] for r in result["runs"] if r["profile"] == profile})
        for strategy in result["config"]["strategies"]:
            regrets = [[100 * v for v in _cell_values(result, profile, strategy, b, "regret")] for b in budgets]
            line = axes[0][col].plot(budgets, [statistics.median(x) for x in regrets], marker="o", label=strategy)[0]
            axes[0][col].fill_between(budgets, [_percentile(x, 0.25) for x in regrets],
                                      [_percentile(x, 0.75) for x in regrets], color=line.get_color(), alpha=0.12)
            claims = [100 * statistics.fmean(_cell_values(result, profile, strategy, b, "claims_faster"))
                      for b in budgets]
            axes[1][col].plot(budgets, claims, marker="o", color=line.get_color(), label=strategy)
        axes[0][col].set_title(f"{profile}: simple regret of the pick")
        axes[0][col].set_ylabel("median regret (%)")
        axes[1][col].set_title(f"{profile}: says 'faster'" + (" (all false)" if profile == "flat" else ""))
        axes[1][col].set_ylabel("runs claiming a win (%)")
        axes[1][col].set_xlabel("budget (engine starts)")
        axes[1][col].set_ylim(-5, 105)
        for ax in (axes[0][col], axes[1][col]):
            ax.grid(alpha=0.3)
            ax.set_xticks(budgets)
    axes[0][0].legend()
    fig.suptitle(f"autotune bench: {result['config']['seeds']} seeds per cell (band: 25-75% of seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def log_to_mlflow(result: Mapping[str, Any], artifacts: Sequence[str | os.PathLike[str]],
                  tracking_uri: str | None = None) -> str:
    """Log the benchmark as one run of MLflow experiment ``autotune/bench``: every summary number, JSON and PNG.

    Uses the tracker's conventions (:mod:`autotune.observers.mlflow`): ``$MLFLOW_TRACKING_URI`` or
    ``sqlite:///mlruns/mlflow.db``, artifacts under ``mlruns/artifacts/``. Returns the run id.
    """
    import mlflow
    from mlflow.entities import Metric, Param, RunTag

    from autotune.observers.mlflow import EXPERIMENT_KIND, artifact_location, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    db = sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(MLFLOW_EXPERIMENT)
    if experiment is None:
        experiment_id = client.create_experiment(MLFLOW_EXPERIMENT,
                                                 artifact_location=artifact_location(uri, MLFLOW_EXPERIMENT),
                                                 tags={"mlflow.experimentKind": EXPERIMENT_KIND})
    else:
        experiment_id = experiment.experiment_id
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment_id)
    cfg = result["config"]
    run = client.create_run(experiment_id, run_name=f"bench-{cfg['seeds']}seeds-{'-'.join(map(str, cfg['budgets']))}",
                            tags={"autotune.kind": "bench"})
    run_id = run.info.run_id
    now = int(time.time() * 1000)
    params = {"profiles": ",".join(cfg["profiles"]), "strategies": ",".join(cfg["strategies"]),
              "budgets": ",".join(map(str, cfg["budgets"])), "seeds": cfg["seeds"], "first_seed": cfg["first_seed"],
              "jobs": cfg["jobs"]}
    metrics = {"wall_s": float(result["wall_s"]),
               "targets_met": float(sum(c["ok"] for c in result["targets"])),
               "targets_total": float(len(result["targets"]))}
    for r in result["summary"]:
        prefix = f"{r['profile']}/{r['strategy']}/b{r['budget']}"
        for key in ("median_regret", "mean_regret", "p90_regret", "coverage", "speedup_coverage", "claim_rate",
                    "mean_restarts_used", "mean_distinct", "mean_found"):
            if r[key] is not None:
                metrics[f"{prefix}/{key}"] = float(r[key])
    client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()],
                     params=[Param(k, str(v)) for k, v in params.items()],
                     tags=[RunTag("autotune.targets_all_met", str(all(c["ok"] for c in result["targets"])))])
    for path in artifacts:
        client.log_artifact(run_id, str(path))
    client.set_terminated(run_id)
    return run_id
