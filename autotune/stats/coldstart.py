"""Cold first starts: does a study count them, and what does a cold start say about the warm throughput?

The first start of a configuration compiles (empty caches). It may also run slower once warm-up is over (the
simulator's profiles model 30-60%, `docs/simulator.md`), or its steady state may be no different: on an H200 a
MoE cold start took 167 s to start and its throughput was not lower, and a dense one ran 1647.6 tok/s cold against
1598.4 warm on the same seed (`docs/measurements/h200-budget-probe.md`). Which holds is a property of the engine
and the machine, so each study tests it on its own data instead of assuming either:

* Every configuration with a cold start and a warm restart gives a **pair** (:func:`cold_pairs`); the baselines,
  the study's first trials, give the first ones.
* :func:`judge_cold` runs a paired t-test on log throughput (``scipy.stats.ttest_rel``). A significant difference:
  cold starts are **not counted** from then on. Equivalence within the study's pooled restart noise (two
  one-sided tests, ``scipy.stats.ttest_1samp``): a cold start whose warm-up converged **counts** as a restart,
  which saves an engine start per configuration. Neither, with at least :data:`MIN_PAIRS` pairs whose mean
  difference lies within the noise the pairs themselves show: it counts **provisionally**, until a difference is
  found. Otherwise (too few pairs, or a mean difference larger than that noise and not yet significant):
  **undecided**.
* While undecided, a cold start is recorded and not counted, and the same seed runs again warm (what autotune
  always did). That is the conservative side: counting a start that may run 30-60% slow would rank
  configurations by their compile luck, while not counting it costs one start per configuration only until the
  pairs it produces decide the question. The provisional state is issue 9's rule (a converged cold start
  counts; the study stops counting when its data show a difference) once there is data to test: a measured bias
  smaller than one restart's own noise at most doubles the variance of a one-restart estimate, and equivalence
  proper needs a dozen pairs at a 10% restart noise (an H200 study of 20 minutes has fewer), so without it every
  new configuration would cost two starts for the whole study. The difference test keeps running on every
  trial's pairs, and a significant difference ends the counting for good. Only the search ever counts a cold
  start: verification, which gives the user's verdict, counts warm restarts only.
* When cold starts differ they still screen (:func:`warm_upper_bound`): a prediction bound for a
  configuration's warm throughput from its cold start alone, from the pairs' spread. A configuration whose bound
  is below the incumbent cannot be the best, and its warm restart would change no decision.

The equivalence margin is the pooled restart-to-restart sd of log throughput: a bias smaller than one restart's
own noise at most doubles the variance of a one-restart estimate (``sigma^2 + delta^2 <= 2 sigma^2``), a cheaper
error than a whole engine start spent on a warm rerun. Early in a study that sd rests on a few restarts, so the
margin is its lower confidence bound (:func:`equivalence_margin`): a lucky wide estimate cannot make equivalence
easy. These are choices, not fitted constants: the margin scales with whatever noise the study measures.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import numpy as np

from autotune.core.facts import WARMUP_RULE
from autotune.records import record
from autotune.core.records import RestartResult
from autotune.stats import scipy_stats

__all__ = [
    "ColdVerdict",
    "DIFFER",
    "MIN_PAIRS",
    "PROVISIONAL",
    "SAME",
    "STEADY_TOLERANCE",
    "UNDECIDED",
    "cold_pairs",
    "equivalence_margin",
    "judge_cold",
    "warm_estimate",
    "warm_upper_bound",
    "warmup_converged",
]

#: Pairs needed before the test may decide: a paired t-test on two pairs has one degree of freedom.
MIN_PAIRS = 3
#: Two consecutive warm-up passes within this relative difference are steady: the rule the ``vllm`` runner and the
#: simulator stop their warm-up on (empirical: the ``vllm`` engine's default ``steady_tolerance``).
STEADY_TOLERANCE = 0.03

UNDECIDED, SAME, DIFFER, PROVISIONAL = "undecided", "same", "differ", "provisional"


def warmup_converged(result: RestartResult, tolerance: float = STEADY_TOLERANCE) -> bool:
    """True when the restart's warm-up ended steady.

    Where the engine says what ended its warm-up (``facts["warmup_rule"]``: the vllm runner and the simulator, with
    the MSER/trend rule of :mod:`autotune.stats.warmup`), that decides: the rule or its noise prior called the
    process warm (``rule``, ``prior``); a warm-up that hit its cap or ran no pass did not. The same decision that
    ended the warm-up then decides whether a cold start may count, not a second, looser test that cannot tell a ramp
    from noise. Otherwise (an engine that does not say: ``cmd``, older records) the last two warm-up passes must
    agree within ``tolerance``. A warm-up that stopped at its cap without settling, or had fewer than two passes,
    says nothing about the timed passes being steady: False.
    """
    if not result.ok:
        return False
    rule = result.facts.get(WARMUP_RULE)
    if isinstance(rule, str):
        return rule in ("rule", "prior")
    if len(result.warmup_tok_s) < 2:
        return False
    a, b = result.warmup_tok_s[-2], result.warmup_tok_s[-1]
    top = max(a, b)
    return top > 0 and abs(a - b) / top <= tolerance


def equivalence_margin(sd: float, df: int, confidence: float = 0.95) -> float:
    """The lower one-sided ``confidence`` bound for a noise sd estimated with ``df`` degrees of freedom
    (chi-square): ``sd * sqrt(df / chi2.ppf(confidence, df))``, about half the estimate at one degree of freedom."""
    if df < 1 or not sd > 0:
        return math.nan
    return float(sd * math.sqrt(df / scipy_stats().chi2.ppf(confidence, df)))


def cold_pairs(restarts_per_config: Iterable[Sequence[RestartResult]]) -> list[tuple[float, float]]:
    """``(cold, warm)`` throughput pairs: each configuration's cold start and the warm restart on its seed.

    A configuration whose cold start has no warm restart on the same seed pairs with the geometric mean of its
    warm restarts on other seeds (noisier, still unbiased); one with no warm restart gives no pair.
    """
    pairs = []
    for restarts in restarts_per_config:
        cold = next((r for r in restarts if r.ok and r.cold and r.value), None)
        if cold is None:
            continue
        warm = [r for r in restarts if r.ok and not r.cold and r.value]
        use = [r for r in warm if r.seed == cold.seed][:1] or warm
        if use:
            logs = np.log([r.measured() for r in use])
            pairs.append((cold.measured(), float(np.exp(logs.mean()))))
    return pairs


@record(emits={"text": "describe"})  # the sentence the report prints, for readers of the JSON
@dataclasses.dataclass(frozen=True)
class ColdVerdict:
    """What the study's own pairs say about cold starts.

    Attributes:
        state: ``undecided`` (recorded, not counted), ``same`` (equivalent: a converged cold start counts),
            ``provisional`` (no difference found, the mean within the pairs' noise: a converged cold start counts
            until one is) or ``differ`` (recorded, not counted, final).
        pairs: Pairs the test used.
        ratio: Geometric mean of cold / warm throughput (``nan`` without pairs).
        p_value: Paired t-test p-value for "cold = warm" (``nan`` when undefined).
        margin: The equivalence margin used (pooled restart sd of log throughput; ``nan`` while unknown).
    """

    state: str = UNDECIDED
    pairs: int = 0
    ratio: float = math.nan
    p_value: float = math.nan
    margin: float = math.nan

    @property
    def counts(self) -> bool:
        """Whether a cold start whose warm-up converged counts as a restart."""
        return self.state in (SAME, PROVISIONAL)

    def describe(self) -> str:
        """One sentence for the report."""
        if self.state == UNDECIDED:
            return (f"cold starts: undecided after {self.pairs} cold/warm pair(s); recorded, not counted "
                    "(each new configuration also ran warm on the same seed)")
        pct = (self.ratio - 1.0) * 100.0
        if self.state == PROVISIONAL:
            return (f"cold starts ran {pct:+.1f}% against warm restarts ({self.pairs} pairs, p={self.p_value:.3g}: no "
                    "difference found, within the pairs' own noise): a cold start whose warm-up converged counted as "
                    "a restart in the search until a difference is found")
        if self.state == DIFFER:
            return (f"cold starts ran {pct:+.1f}% against warm restarts of the same configurations (paired t-test "
                    f"on log throughput, {self.pairs} pairs, p={self.p_value:.3g}): recorded, not counted")
        return (f"cold starts ran {pct:+.1f}% against warm restarts ({self.pairs} pairs, p={self.p_value:.3g}; "
                f"equivalent within the restart noise, +-{self.margin * 100:.1f}%): a cold start whose warm-up "
                "converged counted as a restart in the search")


def judge_cold(pairs: Sequence[tuple[float, float]], noise_sd: float | None, alpha: float = 0.05,
               min_pairs: int = MIN_PAIRS, previous: str = UNDECIDED) -> ColdVerdict:
    """Decide from paired cold/warm throughputs whether cold starts differ from warm ones.

    Equivalent within the margin (two one-sided tests): ``same``. Otherwise a significant paired t-test (once
    ``same``: significantly beyond the margin): ``differ``, which is final (the study says so once, and stops
    counting for good). Otherwise the previous ``same`` holds; or, with ``min_pairs`` pairs whose mean log ratio
    is within their own noise (their sd over sqrt(2): one start's noise when cold and warm starts are equally
    noisy), ``provisional``; or the question stays ``undecided``. The test is repeated as pairs come in, which
    raises the chance of a false ``differ``: that costs starts, never honesty.

    Args:
        pairs: ``(cold, warm)`` throughputs (see :func:`cold_pairs`).
        noise_sd: The study's pooled restart-to-restart sd of log throughput, the equivalence margin. ``None``
            while unknown: no equivalence yet.
        alpha: Level of the difference test and of each one-sided equivalence test.
        min_pairs: Pairs needed before deciding.
        previous: The study's verdict so far.
    """
    usable = [(c, w) for c, w in pairs if c > 0 and w > 0]
    margin = math.nan if noise_sd is None else float(noise_sd)
    if not usable:
        return ColdVerdict(previous, 0, math.nan, math.nan, margin)
    cold, warm = np.log([c for c, _ in usable]), np.log([w for _, w in usable])
    d = cold - warm
    ratio = float(np.exp(d.mean()))
    n = len(usable)
    spread = float(d.std(ddof=1)) if n >= 2 else 0.0
    if spread < 1e-9:
        spread = 0.0  # equal ratios up to rounding (an engine that replays a seed exactly): no t statistic
    stats = scipy_stats()
    p = float(stats.ttest_rel(cold, warm).pvalue) if n >= 2 and spread > 0 else math.nan
    if previous == DIFFER:
        return ColdVerdict(DIFFER, n, ratio, p, margin)
    if n < min_pairs:
        return ColdVerdict(previous, n, ratio, p, margin)
    mean = float(d.mean())
    known = not math.isnan(margin) and margin > 0
    if spread == 0.0:
        # Identical ratios: no noise between a cold start and its warm rerun, the difference is exact.
        p = 1.0 if mean == 0.0 else 0.0
        equivalent, different = known and abs(mean) <= margin, mean != 0.0
    else:
        equivalent = known and max(float(stats.ttest_1samp(d, -margin, alternative="greater").pvalue),
                                   float(stats.ttest_1samp(d, margin, alternative="less").pvalue)) < alpha
        if previous == SAME and known:
            # Once counting, stop only for a difference beyond the margin: the pairs now mix seeds (a counted cold
            # start has no warm rerun of its own seed), and a test repeated after every trial at level alpha would
            # sooner or later call a negligible difference significant.
            different = min(float(stats.ttest_1samp(d, margin, alternative="greater").pvalue),
                            float(stats.ttest_1samp(d, -margin, alternative="less").pvalue)) < alpha
        else:
            different = p < alpha
    # Equivalence first: a difference can be significant and still smaller than one restart's noise (tight pairs
    # over many configurations), and then counting the cold start costs less than rerunning it.
    if equivalent:
        return ColdVerdict(SAME, n, ratio, p, margin)
    if different:
        return ColdVerdict(DIFFER, n, ratio, p, margin)
    if previous == SAME:
        return ColdVerdict(SAME, n, ratio, p, margin)
    # Not different, not shown equivalent: count while the measured bias is within one start's noise as the pairs
    # show it. Such a mean has |t| <= sqrt(n/2), never significant, so this is no looser than the test above.
    within = abs(mean) <= spread / math.sqrt(2.0)
    return ColdVerdict(PROVISIONAL if within else UNDECIDED, n, ratio, p, margin)


def _log_ratios(pairs: Sequence[tuple[float, float]], min_pairs: int) -> np.ndarray | None:
    usable = [(c, w) for c, w in pairs if c > 0 and w > 0]
    if len(usable) < min_pairs:
        return None
    return np.log([c for c, _ in usable]) - np.log([w for _, w in usable])


def warm_estimate(cold_value: float, pairs: Sequence[tuple[float, float]], min_pairs: int = MIN_PAIRS) -> float | None:
    """Point prediction of a configuration's warm throughput from its cold start: ``cold / exp(mean log ratio)``."""
    d = _log_ratios(pairs, min_pairs)
    if d is None or cold_value <= 0:
        return None
    return float(cold_value * math.exp(-float(d.mean())))


def warm_upper_bound(cold_value: float, pairs: Sequence[tuple[float, float]], confidence: float,
                     min_pairs: int = MIN_PAIRS) -> float | None:
    """One-sided prediction bound (at ``confidence``) for a configuration's warm throughput from its cold start.

    From the pairs' log ratios ``d = log cold - log warm`` (mean ``m``, sd ``s``, ``n`` pairs), the warm value of a
    new configuration lies below ``cold * exp(-m + t_{n-1} * s * sqrt(1 + 1/n))`` with probability
    ``confidence`` (a prediction interval for one new ``d``). ``None`` with fewer than ``min_pairs`` pairs.
    """
    d = _log_ratios(pairs, min_pairs)
    if d is None or cold_value <= 0:
        return None
    n = d.size
    t = float(scipy_stats().t.ppf(confidence, n - 1))
    return float(cold_value * math.exp(-float(d.mean()) + t * float(d.std(ddof=1)) * math.sqrt(1.0 + 1.0 / n)))
