"""The report: a table a person reads in ten seconds, and the same facts as JSON.

Winner, baseline, speedup with its interval and verdict come first; then every configured-vs-resolved
warning (the trap this tool exists for), failures, and the budget spent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.measure import format_mean
from autotune.study import TrialRecord, budget_used
from autotune.verify import Verification

__all__ = ["build_report", "render_report"]


def _entry_dict(entry: Any) -> dict[str, Any]:
    s = entry.summary
    out = {
        "label": entry.candidate.config.label(),
        "role": entry.candidate.role,
        "trial_number": entry.candidate.trial_number,
        "config": entry.candidate.config.to_dict(),
        "search_mean": entry.candidate.search_mean,
        "search_estimate": entry.candidate.estimate,
        "shares_slot_with": list(entry.candidate.shares_slot_with),
        "mean": None if math.isnan(s.mean) else s.mean,
        "std": None if math.isnan(s.std) else s.std,
        "ci_low": None if math.isnan(s.ci_low) else s.ci_low,
        "ci_high": None if math.isnan(s.ci_high) else s.ci_high,
        "n": s.n,
        "values": list(s.values),
        "unstable": s.unstable,
        "status": s.status,
        "failure": s.failure,
        "accept_len": s.accept_len,
        "differences": list(s.differences),
        "text": s.describe(),
    }
    if entry.comparison is not None:
        out["speedup"] = entry.comparison.to_dict()
    return out


def build_report(study: optuna.Study) -> dict[str, Any]:
    """Everything a person (or a script) needs to judge the study, as a JSON-ready dict."""
    trials = study.get_trials(deepcopy=False)
    records = [r for r in (TrialRecord.from_frozen(t) for t in trials) if r is not None]
    meta = study.user_attrs.get("meta", {})
    counts = {s.name.lower(): 0 for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    for t in trials:
        if t.state.name.lower() in counts and "duplicate_of" not in t.user_attrs and "infeasible" not in t.user_attrs:
            counts[t.state.name.lower()] += 1
    counts["duplicates"] = sum(1 for t in trials if "duplicate_of" in t.user_attrs)
    counts["infeasible"] = sum(1 for t in trials if "infeasible" in t.user_attrs)
    warnings = [{"trial": r.number, "label": r.config.label(), "differences": list(r.summary.differences)}
                for r in records if r.summary is not None and r.summary.differences and r.duplicate_of is None]
    failures = [{"trial": r.number, "label": r.config.label(), "reason": r.reason}
                for r in records if r.state == "FAIL" and r.reason and r.duplicate_of is None]
    restarts_used, minutes_used = budget_used(study)
    verification_raw = study.user_attrs.get("verification")
    report: dict[str, Any] = {
        "study": study.study_name,
        "meta": meta,
        "trials": counts,
        "warnings": warnings,
        "failures": failures,
        "budget": {
            "restarts_used": restarts_used,
            "minutes_used": round(minutes_used, 3),
            "budget_restarts": meta.get("budget_restarts"),
            "budget_minutes": meta.get("budget_minutes"),
        },
        "search_stopped": study.user_attrs.get("search_stopped"),
        "verification": None,
        "winner": None,
        "baseline": None,
    }
    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None]
    if complete:
        best = max(complete, key=lambda t: t.value)  # type: ignore[arg-type, return-value]
        report["search_best"] = {"trial": best.number, "label": best.user_attrs.get("label"), "mean": best.value}
    if verification_raw is not None:
        v = Verification.from_dict(verification_raw)
        entries = [_entry_dict(e) for e in v.entries]
        report["verification"] = {"entries": entries, "restarts_per_config": v.restarts_per_config,
                                  "max_restarts": v.max_restarts,
                                  "restarts_used": v.restarts_used, "minutes_used": round(v.minutes_used, 3)}
        report["budget"]["verification_restarts"] = v.restarts_used
        report["winner"] = entries[v.winner_index]
        report["baseline"] = next(e for e in entries if e["role"] == "baseline")
        report["verdict"] = v.verdict
        report["winner_is_baseline"] = v.winner.candidate.role == "baseline"
        for e in entries:
            for d in e["differences"]:
                item = {"trial": e["trial_number"], "label": e["label"], "differences": [d], "phase": "verify"}
                if not any(w["label"] == e["label"] and d in w["differences"] for w in warnings):
                    warnings.append(item)
    return report


def _fmt_ci(entry: Mapping[str, Any]) -> str:
    return format_mean(entry["values"], math.nan if entry["ci_low"] is None else entry["ci_low"],
                       math.nan if entry["ci_high"] is None else entry["ci_high"], entry["unstable"])


def render_report(report: Mapping[str, Any]) -> str:
    """The ten-second table."""
    lines: list[str] = []
    meta = report.get("meta", {})
    engine = meta.get("engine", {})
    lines.append(f"Study {report['study']}  |  space {meta.get('space_name')}  |  engine {engine.get('engine')}"
                 f" {engine.get('engine_version', '')}  |  model {meta.get('model')}")
    t = report["trials"]
    b = report["budget"]
    lines.append(f"Trials: {t['complete']} complete, {t['pruned']} raced out, {t['fail']} failed"
                 f"  |  engine starts {b['restarts_used']}"
                 + (f" of {b['budget_restarts']}" if b.get("budget_restarts") else "")
                 + f", {b['minutes_used']:.1f} engine-minutes"
                 + (" (simulated)" if engine.get("simulated") else "")
                 + (f" (verification: {b['verification_restarts']} starts)" if "verification_restarts" in b else ""))
    if report.get("search_stopped"):
        lines.append(f"Search stopped early: {report['search_stopped']}.")
    lines.append("")
    winner, baseline = report.get("winner"), report.get("baseline")
    if winner is None:
        lines.append("No verification yet: run `autotune tune` again to finish the study.")
        if report.get("search_best"):
            sb = report["search_best"]
            lines.append(f"Search best so far (unverified, biased upwards): trial {sb['trial']} {sb['label']} "
                         f"{sb['mean']:.1f} tok/s")
    else:
        width = max(len(e["label"]) for e in report["verification"]["entries"])
        lines.append(f"{'':10}{'configuration':<{width}}  throughput (fresh interleaved restarts)")
        for e in report["verification"]["entries"]:
            tag = "WINNER" if e is winner or e["label"] == winner["label"] else (
                "baseline" if e["role"] == "baseline" else "")
            extra = ""
            if "speedup" in e:
                sp = e["speedup"]
                if sp.get("ci_low") is not None:
                    extra = f"  x{sp['speedup']:.2f} [{sp['ci_low']:.2f}, {sp['ci_high']:.2f}]"
                else:
                    extra = f"  x{sp['speedup']:.2f}"
            if e["status"] != "ok":
                extra += f"  FAILED: {e['failure']}"
            lines.append(f"{tag:<10}{e['label']:<{width}}  {_fmt_ci(e).replace('95% CI', 'CI')}{extra}")
        n_family = len(report["verification"]["entries"])
        lines.append(f"(intervals hold jointly at 95% for these {n_family} configurations: each is a "
                     f"{100 - 5 / n_family:.2f}% interval, so picking the best does not shrink the winner's)")
        lines.append("")
        if report.get("winner_is_baseline"):
            lines.append("Verdict: no configuration beat the baseline - keep the engine defaults.")
        else:
            sp = winner.get("speedup", {})
            family = (f", Bonferroni over {sp['comparisons']} challengers" if sp.get("comparisons", 1) > 1 else "")
            ci = (f" [{sp['ci_low']:.2f}, {sp['ci_high']:.2f}] ({sp['confidence'] * 100:.1f}% CI{family})"
                  if sp.get("ci_low") is not None else "")
            lines.append(f"Verdict: {report['verdict'].upper()} - winner is {sp.get('speedup', float('nan')):.2f}x "
                         f"the baseline{ci}")
        if winner.get("differences"):
            lines.append("WARNING: the winner itself did not run as configured: " + "; ".join(winner["differences"])
                         + ". Its throughput is what the engine resolved to; export it knowing that.")
    if report["warnings"]:
        lines.append("")
        lines.append(f"WARNING: the engine silently changed the configuration in {len(report['warnings'])} "
                     "configuration(s):")
        for w in report["warnings"][:8]:
            where = f"trial {w['trial']}" if w.get("trial") is not None else "verification"
            lines.append(f"  ! {where} {w['label']}: " + "; ".join(w["differences"]))
        if len(report["warnings"]) > 8:
            lines.append(f"  ... and {len(report['warnings']) - 8} more (--json for all)")
    if report["failures"]:
        lines.append("")
        lines.append(f"Failed trials ({len(report['failures'])}):")
        for f in report["failures"][:5]:
            lines.append(f"  x trial {f['trial']} {f['label']}: {f['reason']}")
    if report.get("simulator_check"):
        sc = report["simulator_check"]
        lines.append("")
        lines.append(f"Simulator ground truth (sim engine only): winner's true throughput is "
                     f"{sc['winner_true']:.1f} tok/s = {sc['ratio_to_best'] * 100:.1f}% of the best configuration "
                     f"in the space ({sc['best_true']:.1f} tok/s, {sc['best_label']}).")
    return "\n".join(lines)
