"""``python -m autotune.bench.replay``: verification policies replayed on restarts recorded on real GPUs (issue 31).

The noise model (choices of this benchmark, empirical): per configuration, the counted (ok, not cold) restarts of
every recorded study under ``docs/measurements/`` (a study's own parts left out where its top database holds
them), as log-residuals around each (study, configuration, phase) group's mean (search and verification ran on
different machines: a machine effect is not restart noise), each group's residuals scaled by sqrt(n/(n-1)) so
their variance is unbiased, pooled per configuration. A draw is a residual picked at random plus Gaussian kernel
jitter (Silverman's bandwidth), rescaled so the draw's variance is the residuals' (a smoothed bootstrap: two
draws are never equal), around the phase's mean: the search's restarts around the search mean, verification's
around the verification mean (so the effect is the one verification measured, 1.23x on ``h200-moe30``).

A study at budget B minutes: the search measures whole configurations at the study's recorded search cost per
configuration while what is left exceeds what the policy holds back; verification then runs in the REAL loop
(:func:`autotune.study.run_verification`) on a fake engine drawing from the model, restarts priced at the
configuration's recorded warm wall time, extra rounds only while the budget pays (``may_start``). Policies:
``fixed`` (3 + 3), ``sequential`` (3 + 3, then up to 5 rounds of both while the budget pays, Lan-DeMets OBF), and
``plan`` (:func:`autotune.decisions.planning.plan_restarts` from 2 + 2 search restarts drawn from the model and the
pooled prior, at most ``MAX_SHARE`` of the budget during the search, all that is left at verification start; run
with ``baseline_restarts`` and ``EXTENSION_SHARE``). One challenger (the recorded winner) is verified, on the same
machine as the search (no cold verification starts). The null gives both sides the same configuration's model.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import sys
import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from autotune.records import encode
from autotune.bench._args import BenchParser, count, fail, number, seed_number
from autotune.core.records import EngineConfig, Resolved, RestartResult, Workload
from autotune.decisions import planning
from autotune.decisions.noise import NoisePrior, planning_noise, study_prior
from autotune.decisions.planning import estimate_noise, plan_restarts, plan_rounds, pooled_log_variance
from autotune.decisions.verification import BASELINE, CANDIDATE, Candidate
from autotune.decisions.window import MIN_GAIN, WindowCosts, sized_plan
from autotune.engines.drift import PRESETS, DriftScenario
from autotune.stats.components import Components, components
from autotune.study import EXTENSION_SHARE, run_verification

__all__ = ["Model", "load_models", "main", "replay_cell"]

POLICIES = ("fixed", "sequential", "plan", "paired", "paired-search-window", "paired-raw")
#: A policy drawn on another's random stream: ``paired-raw`` (the paired design with the rounds' own variance, no
#: prior: session 26's analysis) on ``paired``'s, so the two differ by the analysis alone, draw for draw.
STREAM = {"paired-raw": "paired"}
BUDGETS = (20.0, 30.0, 60.0)
MARGIN = 0.03
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "measurements"))


class Model:
    """One configuration's restart noise (pooled log-residuals) and its phases' means and prices."""

    def __init__(self) -> None:
        self.residuals: list[float] = []
        self.means: dict[str, float] = {}   # phase -> mean log throughput (the scenario's study)
        self.warm_s: list[float] = []

    def add_group(self, logs: Sequence[float]) -> None:
        if len(logs) >= 2:
            m = float(np.mean(logs))
            scale = math.sqrt(len(logs) / (len(logs) - 1))
            self.residuals += [(x - m) * scale for x in logs]

    @property
    def sd(self) -> float:
        r = np.asarray(self.residuals)
        return float(math.sqrt(np.mean(r * r))) if r.size else 0.0

    def draw(self, rng: np.random.Generator, phase: str, n: int = 1) -> np.ndarray:
        r = np.asarray(self.residuals)
        sd = self.sd
        h = 0.9 * sd * r.size ** -0.2
        eps = (r[rng.integers(0, r.size, n)] + h * rng.standard_normal(n)) / math.sqrt(1 + (h / sd) ** 2)
        centre = self.means.get(phase, self.means.get("search"))
        return np.exp(centre + eps)

    @property
    def price(self) -> float:
        return float(np.mean(self.warm_s)) / 60.0


def _databases(root: str) -> list[str]:
    dbs = sorted(glob.glob(os.path.join(root, "**", "optuna.db"), recursive=True))
    tops = [d for d in dbs if not any(d != o and d.startswith(os.path.dirname(o) + os.sep) for o in dbs)]
    return tops


class ReplayInputError(ValueError):
    """A scenario or a recorded database the replay cannot use: one line naming it and the fix."""


def _scenarios(root: str) -> list[str]:
    return sorted({os.path.basename(os.path.dirname(db)) for db in _databases(root)})


def load_models(root: str = ROOT, scenario: str = "h200-moe30", scope: str = "all") -> dict[str, Any]:
    """Models of the scenario study's baseline and winner, and its search cost per configuration."""
    import optuna

    from autotune.store import ledger as L
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    models: dict[str, Model] = {}
    info: dict[str, Any] = {}
    for db in _databases(root):
        url = "sqlite:///" + db
        try:
            names = L.study_names(url)
        except Exception as exc:  # noqa: BLE001 - a damaged replay database: one line naming it, not a traceback
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ReplayInputError(f"{db}: cannot be replayed ({first}); restore it with git checkout -- {db}") \
                from None
        for name in names:
            own = os.path.basename(os.path.dirname(db)) == scenario
            if scope == "study" and not own:
                continue
            led = L.load(name, url)
            groups: dict[tuple[str, str], list[RestartResult]] = {}
            search_s, keys = 0.0, set()
            for t in led.study.trials:
                key = led.config_key(t)
                if key is None:
                    continue
                for r in led.restarts(t):
                    groups.setdefault((key, "search"), []).append(r)
                    search_s += r.wall_s or 0.0
                    keys.add(key)
            v = led.verification()
            if v is not None:
                for e in v.entries:
                    groups.setdefault((e.candidate.config.key(), "verify"), []).extend(e.restarts)
            for (key, phase), rs in groups.items():
                m = models.setdefault(key, Model())
                counted = [r for r in rs if r.ok and not r.cold and r.value and r.value > 0]
                logs = [math.log(r.value) for r in counted if r.value]  # all of them: counted holds values > 0
                m.add_group(logs)
                m.warm_s += [r.wall_s for r in counted if r.wall_s]
                if own and logs:
                    m.means[phase] = float(np.mean(logs))
            if own and v is not None:
                info = {"baseline": v.baseline.candidate.config.key(),
                        "winner": next(e.candidate.config.key() for e in v.entries if e.candidate.role != BASELINE),
                        "per_config": search_s / 60.0 / max(1, len(keys)),
                        "others": [[r.value for r in rs if r.ok and not r.cold]
                                   for (k, p), rs in groups.items() if p == "search"]}
    if not info:
        raise ReplayInputError(f"--scenario {scenario}: no verified study of that name under {root}; use one of "
                               f"{', '.join(_scenarios(root)) or 'none (no recorded study there)'}")
    info["models"] = models
    return info


class _Engine:
    """Draws each restart from a configuration's model and keeps the engine-minutes spent."""

    def __init__(self, models: dict[str, Model], rng: np.random.Generator, spent: float) -> None:
        self.models, self.rng, self.spent = models, rng, spent

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        m = self.models[config.key()]
        self.spent += m.price
        value = float(m.draw(self.rng, "verify")[0])
        return RestartResult(status="ok", restart=restart, seed=seed, passes_tok_s=(value,), wall_s=60 * m.price,
                             resolved=Resolved(cudagraph_mode=config.cudagraph_mode))


class _Recorded:
    """Restarts drawn from the recorded GPU studies' noise (:class:`Model`): no drift, each restart independent."""

    def __init__(self, info: dict[str, Any], null: str | None) -> None:
        models = info["models"]
        bkey, wkey = info["baseline"], info["winner"]
        if null is not None:
            src = models[bkey if null == "baseline" else wkey]
            models = {bkey: src, wkey: src}
        self.models, self.bkey, self.wkey = models, bkey, wkey
        self.price_w, self.price_b = models[wkey].price, models[bkey].price
        self.per_config = info["per_config"]
        self.other_groups = [g for g in info["others"] if len(g) >= 2]

    def start(self, rng: np.random.Generator, budget: float) -> None:
        """A new study."""

    def search(self, rng: np.random.Generator, side: str, n: int) -> np.ndarray:
        return self.models[self.wkey if side == "winner" else self.bkey].draw(rng, "search", n)

    def others(self, rng: np.random.Generator) -> list[list[float]]:
        return self.other_groups

    def engine(self, rng: np.random.Generator, spent: float, configs: dict[str, str]) -> Any:
        fake = {key: self.models[self.wkey if side == "winner" else self.bkey] for key, side in configs.items()}
        return _Engine(fake, rng, spent)


class _DriftEngine:
    """A replay's engine on a drifting machine: each restart at the scenario's clock (the study's engine-minutes),
    with the timed passes the verification's workload asks for, priced by them."""

    def __init__(self, scenario: DriftScenario, sides: dict[str, str], spent: float) -> None:
        self.scenario, self.sides, self.spent = scenario, sides, spent
        scenario.clock_s = 60.0 * spent

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        side = self.sides[config.key()]
        cost_s = self.scenario.restart_cost_s(workload.timed_passes)
        self.spent += cost_s / 60.0
        draw = self.scenario.run(side, cost_s, workload.timed_passes)
        return RestartResult(status="ok", restart=restart, seed=seed, passes_tok_s=tuple(draw.passes) or (draw.value,),
                             wall_s=cost_s, resolved=Resolved(cudagraph_mode=config.cudagraph_mode))


#: The drift scenarios (issue 41): a challenger ``effect`` times the baseline on a machine drifting as the named
#: preset of :data:`autotune.engines.drift.PRESETS`; the search measures a configuration every
#: :data:`DRIFT_PER_CONFIG` minutes (issue 41's H100 study: 10 configurations in 15.3 engine-minutes), a warm
#: restart costs :data:`DRIFT_RESTART_MIN` (its verification restarts: about 0.6 min).
DRIFT_PER_CONFIG = 1.5
DRIFT_RESTART_MIN = 0.6
#: The search's timed window in the drift scenarios: two passes of 5 s (the workload default's pass length).
DRIFT_PASSES = 2
DRIFT_PASS_S = 5.0
#: Other configurations whose two search restarts the study pools into its noise prior.
DRIFT_OTHERS = 6


class _Drifting:
    """Restarts drawn in time order on a drifting machine (:func:`autotune.engines.drift.drift_scenario`): the
    baseline measured at the search's start, the winner found somewhere inside it, verification after it."""

    def __init__(self, preset: str, effect: float, null: str | None) -> None:
        self.params = PRESETS[preset]
        self.effect = 1.0 if null is not None else effect
        self.price_w = self.price_b = DRIFT_RESTART_MIN
        self.per_config = DRIFT_PER_CONFIG
        self.scenario: DriftScenario | None = None
        self.budget = 0.0
        #: Every search restart's timed passes, by configuration: what the study sizes verification's window from.
        self.passes: dict[str, list[list[float]]] = {}

    def start(self, rng: np.random.Generator, budget: float) -> None:
        medians: dict[Hashable, float] = {"baseline": 3000.0, "winner": 3000.0 * self.effect}
        medians |= {f"other{i}": 3000.0 for i in range(DRIFT_OTHERS)}
        self.scenario = DriftScenario(medians, self.params, rng, timed_s=DRIFT_PASSES * DRIFT_PASS_S,
                                      n_passes=DRIFT_PASSES, restart_s=60.0 * DRIFT_RESTART_MIN)
        self.budget = budget
        self.passes = {}

    def window(self) -> tuple[Components | None, WindowCosts]:
        """The search's variance components and costs (:mod:`autotune.decisions.window`)."""
        assert self.scenario is not None
        return (components(list(self.passes.values())),
                WindowCosts(self.scenario.pass_s, self.scenario.restart_cost_s(0)))

    def _at(self, side: str, t_s: float, n: int) -> np.ndarray:
        assert self.scenario is not None
        step = 60.0 * DRIFT_RESTART_MIN
        draws = [self.scenario.draw(side, t_s + i * step) for i in range(n)]
        self.passes.setdefault(side, []).extend(list(d.passes) for d in draws)
        return np.array([d.value for d in draws])

    def search(self, rng: np.random.Generator, side: str, n: int) -> np.ndarray:
        # The baseline is the study's first trial; the winner turns up somewhere in the search's first part.
        when = 0.0 if side == "baseline" else float(rng.uniform(0.1, 0.6)) * 60.0 * self.budget
        return self._at(side, when, n)

    def others(self, rng: np.random.Generator) -> list[list[float]]:
        return [list(self._at(f"other{i}", float(rng.uniform(0.0, 0.7)) * 60.0 * self.budget, 2))
                for i in range(DRIFT_OTHERS)]

    def engine(self, rng: np.random.Generator, spent: float, configs: dict[str, str]) -> Any:
        assert self.scenario is not None
        return _DriftEngine(self.scenario, configs, spent)


def replay_cell(info: dict[str, Any] | None, policy: str, budget: float, draws: int, seed: int,
                null: str | None = None, max_share: float | None = None, effect_power: float | None = None,
                drift: str | None = None, effect: float = 1.13, min_gain: float = MIN_GAIN) -> dict[str, float]:
    """``draws`` studies at ``budget`` minutes under ``policy``; ``null``: ``baseline``/``winner`` gives both
    sides that configuration's model. ``drift``: a preset name, the drifting machine's scenario at ``effect``
    instead of the recorded studies (``info`` unused)."""
    source: Any = _Drifting(drift, effect, null) if drift is not None else _Recorded(info or {}, null)
    base_c, win_c = EngineConfig(), EngineConfig(compilation_config={"cudagraph_mode": "FULL"})
    sides = {base_c.key(): "baseline", win_c.key(): "winner"}
    candidates = [Candidate(CANDIDATE, win_c), Candidate(BASELINE, base_c)]
    pw, pb = source.price_w, source.price_b
    q = source.per_config
    rng = np.random.default_rng([seed, POLICIES.index(STREAM.get(policy, policy)), int(budget),
                                 (None, "baseline", "winner").index(null)])
    share = planning.MAX_SHARE if max_share is None else max_share
    out = {"conclusive": 0, "faster": 0, "right": 0, "starts": 0, "configs": 0.0, "over": 0.0}
    for _ in range(draws):
        source.start(rng, budget)
        others = source.others(rng)
        paired = policy.startswith("paired")
        kw: dict[str, Any] = {"paired": paired}
        if paired:
            # Issue 41's design: the noise prior that cannot collapse (the default machine prior, the study's pooled
            # search noise on it, each side at its upper credible value), rounds planned for the paired test, and
            # (``paired``; not ``paired-search-window``) the timed window sized with them where the search's passes
            # give its components (the drift scenarios; the recorded restarts keep no passes).
            sb, sw = source.search(rng, "baseline", 2), source.search(rng, "winner", 2)
            prior = study_prior([list(sb), list(sw)] + others, NoisePrior.default())
            seen = math.exp(np.mean(np.log(sw)) - np.mean(np.log(sb)))
            pvar = (planning_noise(list(sw), prior), planning_noise(list(sb), prior))
            sized = policy in ("paired", "paired-raw") and hasattr(source, "window")
            parts, costs = source.window() if sized else (None, None)

            def paired_plan(max_minutes: float) -> Any:
                def plan_at(vc: float, vb: float, mc: float, mb: float) -> Any:
                    return plan_rounds(vc, vb, max_minutes=max_minutes, search_effect=seen, challenger_minutes=mc,
                                       baseline_minutes=mb, prior_df=0.0 if policy == "paired-raw" else prior.df)
                return sized_plan(plan_at, *pvar, pw, pb, parts, DRIFT_PASSES, costs, min_gain=min_gain)

            reserve = paired_plan(share * budget).minutes or 0.0
        elif policy == "plan":
            sb, sw = source.search(rng, "baseline", 2), source.search(rng, "winner", 2)
            log_var, _ = pooled_log_variance([list(sb), list(sw)] + others)
            seen = math.exp(np.mean(np.log(sw)) - np.mean(np.log(sb)))
            args = (estimate_noise(list(sw), log_var), estimate_noise(list(sb), log_var))
            # A variant of the planner's halving: it plans for sqrt(search_effect); effect**(2p) makes that effect**p.
            pk = dict(search_effect=seen if effect_power is None else seen ** (effect_power / planning.SEARCH_EFFECT_POWER), challenger_minutes=pw, baseline_minutes=pb)
            reserve = plan_restarts(*args, max_minutes=share * budget, **pk).minutes or 0.0
        else:
            reserve = 3 * (pw + pb)
        configs = max(2, int((budget - reserve) // q))
        spent = configs * q
        # The drifting machine runs the timed passes the verification's workload asks for: the search's, unless the
        # paired plan sized another window.
        workload = Workload(timed_passes=DRIFT_PASSES)
        if paired:
            final = paired_plan(max(0.0, budget - spent))
            if policy != "paired-raw":
                # The analysis's prior for a round's log-ratio variance, as the study's plan stores it
                # (autotune.study._planning.plan_for).
                final = dataclasses.replace(final, pair_variance=2.0 * prior.variance, pair_prior_df=prior.df)
            kw |= dict(restarts=final.challenger, baseline_restarts=final.baseline, sequential_rounds=5,
                       extension_share=EXTENSION_SHARE, order_seed=int(rng.integers(1 << 30)), plan=final)
            workload = Workload(timed_passes=final.timed_passes or DRIFT_PASSES)
        elif policy == "plan":
            final = plan_restarts(*args, max_minutes=max(0.0, budget - spent), **pk)
            kw |= dict(restarts=final.challenger, baseline_restarts=final.baseline, sequential_rounds=5,
                       extension_share=EXTENSION_SHARE)
        elif policy == "sequential":
            kw |= dict(restarts=3, sequential_rounds=5)
        else:
            kw |= dict(restarts=3)
        engine = source.engine(rng, spent, sides)
        # A start is priced at the side's restart price, or on the drifting machine at what a restart of the
        # verification's window costs there.
        price = (pw + pb) / 2 if drift is None else source.scenario.restart_cost_s(workload.timed_passes) / 60.0

        def may_start(n: int, e: Any = engine) -> bool:
            return bool(e.spent + n * price <= budget + 1e-9)

        v = run_verification(engine, workload, candidates, seed_for=lambda r: r, margin=MARGIN, may_start=may_start,
                             **kw)
        c = next(e for e in v.entries if e.candidate.role != BASELINE).comparison
        if c is not None:
            out["conclusive"] += (c.ci_low > 1 or c.ci_high < 1
                                  or (c.ci_low >= 1 / (1 + MARGIN) and c.ci_high <= 1 + MARGIN))
        out["faster"] += v.verdict == "faster"
        out["right"] += v.verdict == "faster" if null is None else v.verdict != "faster"
        out["starts"] += v.restarts_used
        out["configs"] += configs
        out["over"] = max(out["over"], engine.spent - budget)
    return {k: (v if k == "over" else v / draws) for k, v in out.items()} | {"draws": draws,
                                                                                "faster_n": out["faster"],
                                                                                "right_n": out["right"]}


def _ci(k: int, n: int) -> tuple[float, float]:
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def run(info: dict[str, Any] | None, draws: int, seed: int, out: Any, budgets: Sequence[float] = BUDGETS,
        max_share: float | None = None, effect_power: float | None = None, policies: Sequence[str] = POLICIES,
        drift: str | None = None, effect: float = 1.13, min_gain: float = MIN_GAIN) -> None:
    started = time.monotonic()
    out.write("| budget | policy | faster (conclusive and right) [95% CP] | conclusive | mean counted starts | "
              "search configurations | false faster, null baseline [95% CP] | false faster, null winner [95% CP] |\n"
              "|---|---|---|---|---|---|---|---|\n")
    for b in budgets:
        for p in policies:
            kw: dict[str, Any] = dict(max_share=max_share, effect_power=effect_power, drift=drift, effect=effect,
                                      min_gain=min_gain)
            r = replay_cell(info, p, b, draws, seed, **kw)
            lo, hi = _ci(int(r["right_n"]), draws)
            right = f"{100 * r['right']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
            cells = []
            for null in ("baseline", "winner"):
                z = replay_cell(info, p, b, draws, seed, null, **kw)
                lo, hi = _ci(int(z["faster_n"]), draws)
                cells.append(f"{100 * z['faster']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]")
            out.write(f"| {b:.0f} min | {p} | {right} | {100 * r['conclusive']:.1f}% | {r['starts']:.1f} | "
                      f"{r['configs']:.1f} | {cells[0]} | {cells[1]} |\n")
            out.flush()
    out.write(f"\n({draws} draws a cell, seed {seed}, {time.monotonic() - started:.0f} s)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.replay", description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=count(1, 1_000_000), default=300)
    parser.add_argument("--seed", type=seed_number, default=0)
    parser.add_argument("--scenario", default="h200-moe30")
    parser.add_argument("--scope", choices=("all", "study"), default="all",
                        help="noise from every recorded study's restarts of a configuration, or the scenario's own")
    parser.add_argument("--budgets", type=number(0, 10_000, above=True), nargs="+", default=list(BUDGETS),
                        help="study budgets in minutes")
    parser.add_argument("--max-share", type=number(0, 1, above=True), default=None, help="a variant of planning.MAX_SHARE")
    parser.add_argument("--effect-power", type=number(0, 10), default=None,
                        help="a variant of the planner's shrinkage: plan for search_effect**p (default: the planner's, planning.SEARCH_EFFECT_POWER)")
    parser.add_argument("--drift", choices=tuple(PRESETS), default=None,
                        help="replay on a drifting machine (issue 41: autotune.engines.drift's preset) instead of the "
                             "recorded studies, with a challenger --effect times the baseline")
    parser.add_argument("--effect", type=float, default=1.13, help="the drift scenario's true speedup (default 1.13)")
    parser.add_argument("--min-gain", type=number(0, 1), default=MIN_GAIN,
                        help="a variant of decisions.window.MIN_GAIN: the least predicted gain for the paired policy "
                             "to size another timed window than the search's (0: always the predicted best)")
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    args = parser.parse_args(argv)
    if args.drift is not None:
        sys.stdout.write(f"drift scenario: preset {args.drift} {encode(PRESETS[args.drift])}, effect "
                         f"{args.effect:g}x, {DRIFT_PER_CONFIG} min a search configuration, {DRIFT_RESTART_MIN} min a "
                         "warm restart\n\n")
        run(None, args.draws, args.seed, sys.stdout, args.budgets, args.max_share, args.effect_power, args.policies,
            args.drift, args.effect, args.min_gain)
        return 0
    try:
        info = load_models(scenario=args.scenario, scope=args.scope)
    except ReplayInputError as exc:
        fail(parser.prog, str(exc))
    m = info["models"]
    sys.stdout.write(f"{args.scenario} ({args.scope}): baseline CV {100 * m[info['baseline']].sd:.1f}% "
                     f"({len(m[info['baseline']].residuals)} residuals), winner CV {100 * m[info['winner']].sd:.1f}% "
                     f"({len(m[info['winner']].residuals)}), effect "
                     f"{math.exp(m[info['winner']].means['verify'] - m[info['baseline']].means['verify']):.3f}x, "
                     f"search {info['per_config']:.2f} min/configuration\n\n")
    run(info, args.draws, args.seed, sys.stdout, args.budgets, args.max_share, args.effect_power, args.policies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
