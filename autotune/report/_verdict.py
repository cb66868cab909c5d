"""What the report says under an open verdict: why the interval still straddles 1, and what would close it.

An open verdict ("no significant difference") is not an answer a user can act on unless it says whether more
restarts would settle it and what they cost. Two studies on the H200 ended open on a real 1.2-1.3x win with only
``--json``'s ``sequential: null`` to show for it. The note names the cause (the budget's share could not pay for the
effect, the noise was larger than planned, the effect smaller than planned, the budget ended the rounds kept for an
extension) and, where more rounds of the same design would likely close it, how many, their minutes, and the
budget to give the same command. The estimate reads the verification's own restarts (it is advice for the user;
the verdict never reads it).
"""

from __future__ import annotations

import math

from autotune.decisions.noise import SIDE_PRIOR_DF
from autotune.decisions.planning import RestartPlan, estimate_noise, pooled_log_variance, power
from autotune.decisions.sequential import DEFAULT_MARGIN, SequentialPlan
from autotune.decisions.verification import BASELINE, Verification, VerifiedConfig
from autotune.stats import scipy_stats
from autotune.stats.intervals import PairPrior, Verdict, matched_pairs
from autotune.stats.sequential import look_levels
from autotune.store.ledger import Ledger, StudyMeta
from autotune.study import StartCosts

__all__ = ["decision_chance", "open_verdict_note"]

#: Measured noise this much above the planned noise counts as "larger than planned" (between-restart CVs from three
#: restarts vary by about this much between draws at the H200's noise: an empirical line, not a test).
_NOISIER = 1.25


def _counted(entry: VerifiedConfig) -> list[float]:
    return [float(r.value) for r in entry.restarts if r.ok and not r.cold and r.value]


def _cv(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return estimate_noise(values, 0.0, 0.0).cv


def open_verdict_note(ledger: Ledger, meta: StudyMeta, v: Verification) -> str | None:
    """The note under an open verdict (``None`` when the verdict is settled, or nothing could be compared)."""
    entry = v.entries[v.winner_index]
    comparison = entry.comparison
    if entry.candidate.role == BASELINE or comparison is None or comparison.verdict != Verdict.NOT_SIGNIFICANT:
        return None
    if v.sequential is not None and v.sequential.equivalent:
        return None
    if v.answer(meta.verify_margin if meta.verify_margin is not None else DEFAULT_MARGIN) != Verdict.UNDECIDED:
        return None
    design = ledger.verify_sequential()
    plan = v.plan
    if plan is None:
        return _legacy_note(ledger, meta, v, design)
    base = next(e for e in v.entries if e.candidate.role == BASELINE)
    if plan.paired:
        return _paired_note(ledger, meta, v, design, plan)
    w, b = _counted(entry), _counted(base)
    why = _why_open(plan, w, b, comparison.speedup)
    close = _what_closes(ledger, meta, design, entry.candidate.config.key(), base.candidate.config.key(), w, b,
                         comparison.speedup, plan)
    return f"Open: {why}. {close}"


def _why_open(plan: RestartPlan, w: list[float], b: list[float], speedup: float) -> str:
    reasons = []
    if plan.basis == "budget":
        reasons.append(f"the budget's share paid for restarts that resolve {plan.resolvable:.2f}x at "
                       f"{100 * plan.power:.0f}% power, not the {plan.min_effect:.2f}x asked for")
    cv_w, cv_b = _cv(w), _cv(b)
    noisier = [f"the {who}'s restarts varied {100 * seen:.0f}% where {100 * planned:.0f}% was planned"
               for who, seen, planned in (("baseline", cv_b, plan.baseline_cv), ("winner", cv_w, plan.challenger_cv))
               if seen is not None and seen > _NOISIER * planned]
    if noisier:
        reasons.append("noise larger than planned (" + "; ".join(noisier) + ")")
    if math.isfinite(speedup) and speedup < plan.effect and abs(math.log(speedup)) < abs(math.log(plan.effect)):
        reasons.append(f"a smaller effect than planned for ({speedup:.2f}x seen, {plan.effect:.2f}x planned)")
    if len(w) < plan.challenger or len(b) < plan.baseline:
        reasons.append(f"the budget cut the planned restarts short ({len(w)} of {plan.challenger} winner, "
                       f"{len(b)} of {plan.baseline} baseline ran)")
    if not reasons:
        reasons.append("chance: the plan gives a real effect of its size a "
                       f"{100 * (1 - plan.power):.0f}% chance of staying open")
    return "; ".join(reasons)


def _what_closes(ledger: Ledger, meta: StudyMeta, design: SequentialPlan | None, winner_key: str, base_key: str,
                 w: list[float], b: list[float], speedup: float, plan: RestartPlan) -> str:
    """How many more rounds of the design's winner-and-baseline pairs would likely close it, and the budget."""
    if design is None or design.first_alpha <= 0.0 or design.extra_rounds == 0:
        return "No rounds were kept for an extension of this verification."
    done = max(0, min(len(w) - design.n_winner, len(b) - design.n_baseline))
    left = design.extra_rounds - done
    if left <= 0:
        return (f"All {design.extra_rounds} rounds kept for an extension have run: the difference, if any, is below "
                "what this study can resolve.")
    prior = pooled_log_variance([w, b])[0]
    var_w, var_b = estimate_noise(w, prior).variance, estimate_noise(b, prior).variance
    need = None
    if math.isfinite(speedup) and abs(math.log(speedup)) > 1e-3:
        for k in range(done + 1, design.extra_rounds + 1):
            level = look_levels([design.fraction(j) for j in range(1, k + 1)], design.alpha)[-1]
            if power(len(w) + k - done, len(b) + k - done, var_w, var_b, speedup, level) >= plan.power:
                need = k - done
                break
    pair_min = StartCosts.of(ledger).forecast([(winner_key, False), (base_key, False)])
    if need is None:
        return (f"Even the {left} rounds kept for an extension would likely not close it at the {speedup:.2f}x seen: "
                "treat it as no difference this study can resolve.")
    minutes = need * pair_min
    text = (f"About {need} more round{'s' if need != 1 else ''} of the winner and the baseline "
            f"({2 * need} restarts, ~{minutes:.0f} min) would likely close it")
    return text + _run_again(ledger, meta, minutes, 2 * need) + "."


def _run_again(ledger: Ledger, meta: StudyMeta, minutes: float, starts: int) -> str:
    """``: run the same command with --budget-minutes N`` (or ``--budget-restarts``): the budget that pays for
    ``minutes`` and ``starts`` more than the study used."""
    if meta.budget_minutes is not None:
        _, used = ledger.budget_used()
        return f": run the same command with --budget-minutes {math.ceil(used + minutes + 0.5)}"
    if meta.budget_restarts is not None:
        spent, _ = ledger.budget_used()
        return f": run the same command with --budget-restarts {spent + starts}"
    return ": run the same command again"


def _legacy_note(ledger: Ledger, meta: StudyMeta, v: Verification, design: SequentialPlan | None) -> str | None:
    """A fixed-design study's note: why no sequential round ran although the design allowed some.

    The H200 MoE study ended "no significant difference" with its interval straddling 1 and said nothing of the
    sequential rounds it was set to run: the budget left after the verification rounds paid for none, and only
    ``--json``'s ``sequential: null`` showed it.
    """
    if design is None or design.extra_rounds > 0 or not meta.verify_sequential_rounds:
        return None
    entry = v.entries[v.winner_index]
    base = next(e for e in v.entries if e.candidate.role == BASELINE)
    pair = [(entry.candidate.config.key(), False), (base.candidate.config.key(), False)]
    starts, minutes = ledger.budget_used()
    spent = []
    if meta.budget_minutes is not None:
        round_min = StartCosts.of(ledger).forecast(pair)
        spent.append(f"{minutes:.1f} of {meta.budget_minutes:g} engine-minutes used when the verification rounds "
                     f"ended, a round of the winner and the baseline ~{round_min:.1f} min")
    if meta.budget_restarts is not None:
        spent.append(f"{starts} of {meta.budget_restarts} engine starts used, a round 2")
    return (f"No sequential round ran: the interval still straddles 1, and the budget left paid for none of the up to "
            f"{meta.verify_sequential_rounds} rounds that could have settled it"
            + (f" ({'; '.join(spent)})" if spent else "") + ".")


# -- the paired design's note (issue 41) --------------------------------------------------------------------------

#: The prior sd of a true speedup's log (about 1.16x): the advice shrinks the effect seen toward none by it
#: (empirical: the speedups verified on real GPUs, docs/measurements/, lie between 1.1x and 1.6x; a prior this wide
#: keeps a lucky early look, 1.21x on the H100 where 1.13x was true, from promising a quick close).
ADVICE_PRIOR_SD = 0.15
#: The advice names the fewest more rounds that give at least this chance of a decision.
ADVICE_TARGET = 0.8


def decision_chance(d: list[float], var_d: float, extra: int, level: float, margin: float,
                    prior_sd: float = ADVICE_PRIOR_SD, prior_df: float = 0.0) -> float:
    """The chance that ``extra`` more rounds end in a decision ("faster"/"slower", or "equivalent" within
    ``margin``) at the final look's nominal ``level``, from the pairs' log ratios ``d`` so far: the predictive
    probability under the effect's posterior (a normal prior of sd ``prior_sd`` around no effect, the pairs'
    mean with variance ``var_d / n``), not the power at the effect seen (which assumes the luckiest look is true).
    ``prior_df``: the degrees of freedom the analysis's moderated variance adds to the rounds' (its t quantile).
    """
    n0 = len(d)
    if n0 == 0 or var_d <= 0.0:
        return 0.0
    mean = sum(d) / n0
    post_var = 1.0 / (1.0 / prior_sd ** 2 + n0 / var_d)
    post_mean = post_var * n0 * mean / var_d
    total = n0 + extra
    mu = (n0 * mean + extra * post_mean) / total
    sd = extra * math.sqrt(post_var + var_d / max(extra, 1)) / total if extra else 0.0
    stats = scipy_stats()
    half = float(stats.t.isf(level / 2.0, max(1.0, total - 1 + prior_df))) * math.sqrt(var_d / total)
    bound = math.log1p(margin) - half
    if sd == 0.0:
        return float(abs(mu) > half or abs(mu) < bound)
    norm = stats.norm
    decided = norm.sf((half - mu) / sd) + norm.cdf((-half - mu) / sd)
    equivalent = max(0.0, norm.cdf((bound - mu) / sd) - norm.cdf((-bound - mu) / sd)) if bound > 0 else 0.0
    return float(min(1.0, decided + equivalent))


def _paired_note(ledger: Ledger, meta: StudyMeta, v: Verification, design: SequentialPlan | None,
                 plan: RestartPlan) -> str:
    """``Undecided: ...; about N more rounds (~M min) would give a P% chance of a decision: run ...``."""
    entry = v.entries[v.winner_index]
    base = next(e for e in v.entries if e.candidate.role == BASELINE)
    w, b = matched_pairs(entry.restarts, base.restarts)
    d = [math.log(x) - math.log(y) for x, y in zip(w, b)]
    prior = plan.pair_prior
    planned = (prior.variance if prior is not None
               else math.log1p(plan.challenger_cv ** 2) + math.log1p(plan.baseline_cv ** 2))
    seen = (sum((x - sum(d) / len(d)) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else planned
    # The pairs' noise moderated as the analysis moderates it (the plan's prior; a plan stored before it: its planned
    # noise, worth SIDE_PRIOR_DF): a few pairs that agreed by luck don't promise.
    moderating = prior if prior is not None else PairPrior(max(planned, 1e-12), SIDE_PRIOR_DF)
    var_d = moderating.moderate(seen, len(d) - 1)[0] if d else planned
    why = (f"{len(d)} rounds paired, the rounds' log ratios varied {100 * math.sqrt(max(seen, 0.0)):.0f}% where "
           f"{100 * math.sqrt(planned):.0f}% was planned")
    if len(d) < plan.baseline:
        why += f"; the budget or failures cut the {plan.baseline} planned rounds to {len(d)}"
    margin = meta.verify_margin if meta.verify_margin is not None else DEFAULT_MARGIN
    if design is None or design.extra_rounds == 0:
        return f"Undecided: {why}. No rounds were kept for an extension of this verification."
    done = max(0, len(d) - design.n_winner)
    left = design.extra_rounds - done
    if left <= 0:
        return (f"Undecided: {why}. All {design.extra_rounds} rounds kept for an extension have run: the difference, "
                "if any, is below what this study can resolve.")
    chances = []
    for k in range(1, left + 1):
        level = look_levels([design.fraction(j) for j in range(1, done + k + 1)], design.alpha)[-1]
        chances.append(decision_chance(d, var_d, k, level, margin, prior_df=prior.df if prior is not None else 0.0))
    need = next((k for k, p in enumerate(chances, 1) if p >= ADVICE_TARGET), None)
    k = need if need is not None else left
    chance = chances[k - 1]
    pair_min = StartCosts.of(ledger).forecast([(entry.candidate.config.key(), False),
                                               (base.candidate.config.key(), False)])
    minutes = k * pair_min
    text = (f"Undecided: {why}. About {k} more round{'s' if k != 1 else ''} of the winner and the baseline "
            f"(~{minutes:.0f} min) would give a {100 * chance:.0f}% chance of a decision")
    text += _run_again(ledger, meta, minutes, 2 * k)
    if need is None:
        text += f" (the {left} rounds kept for an extension are all there is)"
    return text + "."
