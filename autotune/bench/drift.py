"""``python -m autotune.bench.drift``: the drifting machine's parameters fitted from restarts recorded on real GPUs.

The model is :mod:`autotune.engines.drift`'s. The data are time-ordered series of restarts, one per machine
session: issue 41's 16 H100 verification restarts (``docs/measurements/h100-issue41-verification.json``) and every
study under ``docs/measurements/`` (Optuna databases; each restart placed at its trial's start plus the wall time
of the restarts before it in the trial, verification rounds from their first claim's start; a study's restarts
split into sessions where more than :data:`SESSION_GAP_S` passes between two). Cold and failed restarts are left
out; a restart stored in several databases (a study's parts) counts once.

The fit, in two steps:

1. **Passes** (``pass_sd``): the within-restart spread of every restart's timed passes, by moments: each restart's
   sum of squared log deviations from its mean is compared with its expectation under the fast OU wander, given its
   passes' lengths and :data:`PASS_TAU_S` (issue 41's vLLM-only measurement: successive 1.3-s rounds correlate
   0.64, so tau = -1.3 / ln 0.64 = 2.9 s, an empirical input, not fitted here).
2. **Restarts** (``level_sd``, ``level_tau_s``, ``restart_sd``): restricted maximum likelihood of the restarts' log
   values, a Gaussian process per session with the covariance ``level_sd^2 exp(-|dt|/tau)`` plus, on the diagonal,
   ``restart_sd^2`` and the pass wander averaged over the restart's timed window; a free mean per (session,
   configuration), so only changes within a session inform it.

Uncertainty: a parametric bootstrap (the fitted model redrawn on the same design and refitted; percentile
intervals) for step 2, a chi-square interval for step 1. The init-time coupling is a moment fit of the
within-(session, configuration) residuals of log start-up seconds against log throughput.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, stats

from autotune.records import decode, encode
from autotune.core.records import RestartResult
from autotune.engines.drift import PRESETS, DriftParams, window_g

__all__ = ["PRESET_SESSIONS", "FitResult", "Observation", "Series", "fit_drift", "fit_pass_sd", "fit_preset",
           "fit_restarts", "issue41_series", "load_series", "main", "simulate_series"]

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "measurements"))
ISSUE41_FILE = "h100-issue41-verification.json"
#: Issue 41: successive 1.3-s rounds inside one engine correlate 0.64 -> tau = -1.3 / ln(0.64). Empirical input.
PASS_TAU_S = -1.3 / math.log(0.64)
#: A pause longer than this between two restarts of one study starts a new session (a resume, another machine).
SESSION_GAP_S = 1800.0
#: Bounds of the restart fit: level sd (log), level correlation time (s), restart sd (log).
BOUNDS = ((1e-3, 1.0), (20.0, 86400.0), (0.0, 0.5))
#: The recorded sessions each preset of :data:`autotune.engines.drift.PRESETS` was fitted on, named so that a
#: measurement added later does not move a preset without a refit: ``h100`` is issue 41's H100 session; ``pooled``
#: every session recorded on an H100 or H200 when the presets were fitted.
PRESET_SESSIONS: dict[str, tuple[str, ...]] = {
    "h100": ("issue41-h100",),
    "pooled": ("issue41-h100", "h100-moe-plan#0", "h200-b20#0", "h200-dummy#0", "h200-dummy-new#1", "h200-moe#0",
               "h200-moe-levels#0", "h200-moe-plan#0", "h200-moe-schedule#0", "h200-moe30#0", "h200-moe30#1"),
}
#: The sessions the presets' passes and init coupling were fitted on (every session recorded when they were fitted):
#: named, as the restart sessions are, so a measurement added later (session 25's ``h100-moe-plan#1``) does not move
#: a preset without a refit that names it.
PASS_SESSIONS: tuple[str, ...] = PRESET_SESSIONS["pooled"]
#: Derived figures reported with intervals (10 s timed): a restart's total sd, the correlation of two restarts 60 s
#: apart, and the sd of the log ratio of two restarts of one configuration 60 s and 10 minutes apart.
DERIVED = ("restart_cv_10s", "corr_60s", "diff_sd_60s", "diff_sd_600s")


def _derived(p: DriftParams) -> tuple[float, ...]:
    return (math.sqrt(p.restart_var(10.0)), p.correlation(60.0, 10.0), p.diff_sd(60.0, 10.0), p.diff_sd(600.0, 10.0))


@dataclasses.dataclass(frozen=True)
class Observation:
    """One warm restart: its configuration, the middle of its timed window (s from the session's start), its value
    (tok/s), its timed passes and their seconds (one group per load level: passes at different loads are not
    comparable), its start-up seconds."""

    config: str
    t_s: float
    value: float
    pass_groups: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = ()
    startup_s: float | None = None
    timed_s: float = 10.0


@dataclasses.dataclass
class Series:
    """One machine session's restarts, in time order."""

    name: str
    obs: list[Observation]

    def groups(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, o in enumerate(self.obs):
            out.setdefault(o.config, []).append(i)
        return out


# -- data ------------------------------------------------------------------------------------------------


def issue41_series(path: str | None = None) -> Series:
    """Issue 41's 16 verification restarts as a series (times and pass lengths as the file states them)."""
    with open(path or os.path.join(ROOT, ISSUE41_FILE), encoding="utf-8") as f:
        data = json.load(f)
    rows = [(side, r[side]) for r in data["rounds"] for side in data["order_in_round"]]
    gap = data["span_s"] / (len(rows) - 1)
    n, pass_s = int(data["timed_passes"]), float(data["pass_s"])
    return Series("issue41-h100", [Observation(side, i * gap, float(v), timed_s=n * pass_s)
                                   for i, (side, v) in enumerate(rows)])


def _databases(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, "**", "optuna.db"), recursive=True))


def _timed(r: RestartResult) -> tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]:
    """The restart's timed passes with their seconds, one group per load level (none without the seconds)."""
    passes = tuple(float(x) for x in r.passes_tok_s)
    if len(r.passes_s) != len(passes):
        return ()
    secs = tuple(float(x) for x in r.passes_s)
    n = len(r.levels) or 1
    size = len(passes) // n
    if size * n != len(passes):
        return ()
    return tuple((passes[i * size:(i + 1) * size], secs[i * size:(i + 1) * size]) for i in range(n))


def _study_restarts(url: str, name: str) -> list[tuple[float, str, RestartResult]]:
    """(start time as a POSIX timestamp, config key, restart) of every restart of one stored study."""
    import optuna

    from autotune.store import ledger as L
    led = L.load(name, url)
    out: list[tuple[float, str, RestartResult]] = []
    for t in led.study.trials:
        key = led.config_key(t)
        if key is None or t.datetime_start is None:
            continue
        clock = t.datetime_start.timestamp()
        for r in led.restarts(t):
            out.append((clock, key, r))
            clock += r.wall_s or 0.0
    v = led.verification()
    rounds = led.verify_rounds()
    if v is not None and rounds:
        try:
            claims = optuna.load_study(study_name=name + L.CLAIMS_SUFFIX, storage=url).trials
        except KeyError:
            claims = []
        starts = [c.datetime_start.timestamp() for c in claims if c.datetime_start is not None]
        if starts:
            clock = min(starts)
            order = [e.candidate.config.key() for e in v.entries if e.candidate.role != "baseline"]
            order += [e.candidate.config.key() for e in v.entries if e.candidate.role == "baseline"]
            for rnd in sorted(rounds):
                for key in sorted(rounds[rnd], key=lambda k: order.index(k) if k in order else len(order)):
                    for d in rounds[rnd][key]:
                        r = decode(RestartResult, d)
                        out.append((clock, key, r))
                        clock += r.wall_s or 0.0
    return out


def load_series(root: str = ROOT, include_issue41: bool = True) -> list[Series]:
    """Every recorded machine session under ``root`` with a configuration measured warm at least twice."""
    import optuna

    from autotune.store import ledger as L
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    seen: set[tuple[str, str, float]] = set()
    by_study: dict[str, list[tuple[float, str, RestartResult]]] = {}
    for db in _databases(root):
        url = "sqlite:///" + db
        for name in L.study_names(url):
            for when, key, r in _study_restarts(url, name):
                ident = (name, key, round(r.value or -1.0, 6))
                if ident in seen or not r.ok or r.cold or not r.value or r.value <= 0:
                    continue
                seen.add(ident)
                by_study.setdefault(name, []).append((when, key, r))
    out: list[Series] = [issue41_series()] if include_issue41 else []
    for name, rows in sorted(by_study.items()):
        rows.sort(key=lambda x: x[0])
        session: list[Observation] = []
        t0 = last_end = None
        part = 0

        def close() -> None:
            if session:
                out.append(Series(f"{name}#{part}", list(session)))

        for when, key, r in rows:
            if last_end is not None and when - last_end > SESSION_GAP_S:
                close()
                session, t0, part = [], None, part + 1
            t0 = when if t0 is None else t0
            groups = _timed(r)
            timed = sum(sum(secs) for _, secs in groups) or 10.0
            wall = r.wall_s or 0.0
            mid = when - t0 + wall - timed / 2.0
            session.append(Observation(key, mid, float(r.value or 0.0), groups, r.startup_s, timed))
            last_end = when + wall
        close()
    return [s for s in (_repeated(s) for s in out) if len(s.obs) >= 2]


def _repeated(series: Series) -> Series:
    """The series without configurations measured once in it (their free mean absorbs them whole)."""
    keep = {k for k, idx in series.groups().items() if len(idx) >= 2}
    return Series(series.name, [o for o in series.obs if o.config in keep])


# -- step 1: passes --------------------------------------------------------------------------------------


def _window_cov(secs: Sequence[float], tau: float) -> np.ndarray:
    """Covariance of back-to-back window means of a unit-variance OU process with correlation time ``tau``."""
    n = len(secs)
    starts = np.concatenate(([0.0], np.cumsum(secs)[:-1]))
    c = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            if i == j:
                c[i, j] = window_g(secs[i] / tau)
                continue
            a, b = (i, j) if i < j else (j, i)
            gap = starts[b] - (starts[a] + secs[a])
            ea, eb = secs[a] / tau, secs[b] / tau
            c[i, j] = (1 - math.exp(-ea)) * (1 - math.exp(-eb)) / (ea * eb) * math.exp(-gap / tau)
    return c


def fit_pass_sd(series: Iterable[Series], tau_s: float = PASS_TAU_S, ref_s: float = 5.0
                ) -> tuple[float, tuple[float, float], int]:
    """``pass_sd`` (sd of a ``ref_s``-second pass) from the within-restart spread of timed passes, its 95% interval
    and the degrees of freedom (passes less one per restart)."""
    ss = expected = 0.0
    dof = 0
    for s in series:
        for passes, secs in (g for o in s.obs for g in o.pass_groups):
            if len(passes) < 2:
                continue
            x = np.log(np.asarray(passes))
            c = _window_cov(secs, tau_s)
            n = len(x)
            ss += float(np.sum((x - x.mean()) ** 2))
            expected += float(np.trace(c) - c.sum() / n)  # E[SS] per unit instantaneous variance
            dof += n - 1
    if dof == 0:
        raise ValueError("no restart with two timed passes and their seconds: pass_sd cannot be fitted")
    fast_var = ss / expected
    scale = window_g(ref_s / tau_s)
    lo, hi = (math.sqrt(fast_var * scale * dof / stats.chi2.ppf(q, dof)) for q in (0.975, 0.025))
    return math.sqrt(fast_var * scale), (lo, hi), dof


# -- step 2: restarts ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Design:
    t: np.ndarray
    x: np.ndarray          # fixed effects: one column per configuration
    timed: np.ndarray
    y: np.ndarray


def _designs(series: Iterable[Series]) -> list[_Design]:
    out = []
    for s in series:
        keys = sorted(s.groups())
        x = np.array([[1.0 if o.config == k else 0.0 for k in keys] for o in s.obs])
        out.append(_Design(np.array([o.t_s for o in s.obs]), x, np.array([o.timed_s for o in s.obs]),
                           np.log([o.value for o in s.obs])))
    return out


def _cov(d: _Design, level_sd: float, tau: float, restart_sd: float, pass_params: DriftParams) -> np.ndarray:
    dt = np.abs(d.t[:, None] - d.t[None, :])
    nugget = restart_sd ** 2 + np.array([pass_params.window_var(w) for w in d.timed])
    return level_sd ** 2 * np.exp(-dt / tau) + np.diag(nugget)


def _reml(theta: Sequence[float], designs: Sequence[_Design], pass_params: DriftParams,
          ys: Sequence[np.ndarray] | None = None) -> float:
    level_sd, tau, restart_sd = theta
    total = 0.0
    for k, d in enumerate(designs):
        y = d.y if ys is None else ys[k]
        v = _cov(d, level_sd, tau, restart_sd, pass_params)
        try:
            lv = np.linalg.cholesky(v)
        except np.linalg.LinAlgError:
            return 1e12
        vi_x = np.linalg.solve(v, d.x)
        vi_y = np.linalg.solve(v, y)
        xvx = d.x.T @ vi_x
        sign, logdet_xvx = np.linalg.slogdet(xvx)
        beta = np.linalg.solve(xvx, d.x.T @ vi_y)
        quad = float(y @ vi_y - (d.x.T @ vi_y) @ beta)
        total += 2.0 * float(np.sum(np.log(np.diag(lv)))) + logdet_xvx + quad
    return total


def fit_restarts(series: Sequence[Series], pass_params: DriftParams, ys: Sequence[np.ndarray] | None = None,
                 starts: Sequence[tuple[float, float, float]] | None = None) -> tuple[float, float, float]:
    """(level_sd, level_tau_s, restart_sd) by REML, the pass wander taken from ``pass_params``."""
    designs = _designs(series)
    # Optimised on log scales (sd and tau differ by five orders of magnitude); restart_sd may reach 0.
    bounds = [(math.log(BOUNDS[0][0]), math.log(BOUNDS[0][1])), (math.log(BOUNDS[1][0]), math.log(BOUNDS[1][1])),
              BOUNDS[2]]

    def objective(z: NDArray[np.float64]) -> float:  # scipy's minimize hands the point as an array
        return _reml((math.exp(z[0]), math.exp(z[1]), z[2]), designs, pass_params, ys)

    best: Any = None
    # Several starts: the likelihood is flat along sd^2/tau (short sessions see a slope, not a level).
    for sd0, tau0, rs0 in starts or [(0.08, t, r) for t in (60.0, 600.0, 6000.0) for r in (0.0, 0.05)]:
        res = optimize.minimize(objective, x0=[math.log(sd0), math.log(tau0), rs0], method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    return math.exp(best.x[0]), math.exp(best.x[1]), float(best.x[2])


def simulate_series(series: Sequence[Series], params: DriftParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Log values drawn from ``params`` at the design of ``series`` (each configuration's mean 0)."""
    out = []
    for d in _designs(series):
        v = _cov(d, params.level_sd, params.level_tau_s, params.restart_sd, params)
        out.append(np.linalg.cholesky(v) @ rng.standard_normal(len(d.y)))
    return out


# -- init coupling ---------------------------------------------------------------------------------------


def fit_init(series: Sequence[Series], params: DriftParams) -> dict[str, float]:
    """The init coupling by moments on within-(session, configuration) residuals of log start-up seconds and log
    throughput (restarts with both): their correlation, ``init_coupling`` and ``init_sd``."""
    li: list[float] = []
    ly: list[float] = []
    wv: list[float] = []
    for s in series:
        for idx in s.groups().values():
            rows = [s.obs[i] for i in idx if s.obs[i].startup_s]
            if len(rows) < 2:
                continue
            a = np.log([o.startup_s for o in rows if o.startup_s])  # all of them: rows hold a startup_s
            b = np.log([o.value for o in rows])
            scale = math.sqrt(len(rows) / (len(rows) - 1))
            li += list((a - a.mean()) * scale)
            ly += list((b - b.mean()) * scale)
            wv += [params.window_var(o.timed_s) for o in rows]
    if len(li) < 3:
        return {"n": float(len(li))}
    i, y = np.asarray(li), np.asarray(ly)
    cov = float(np.mean(i * y))
    machine_var = max(float(np.mean(y * y)) - float(np.mean(wv)), 1e-12)
    coupling = max(-cov / machine_var, 0.0)
    init_sd = math.sqrt(max(float(np.mean(i * i)) - coupling ** 2 * machine_var, 0.0))
    return {"n": float(len(li)), "corr": float(np.corrcoef(i, y)[0, 1]), "init_coupling": coupling,
            "init_sd": init_sd}


# -- the whole fit ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The fitted machine, 95% intervals per parameter, and what it was fitted on."""

    params: DriftParams
    intervals: dict[str, tuple[float, float]]
    series: int
    restarts: int
    pass_dof: int
    init: dict[str, float]


def fit_drift(series: Sequence[Series], bootstrap: int = 100, seed: int = 0, pass_tau_s: float = PASS_TAU_S,
              aux_series: Sequence[Series] | None = None) -> FitResult:
    """Fit every parameter of :class:`~autotune.engines.drift.DriftParams` that the data identify (``pass_tau_s``
    is an input); ``bootstrap`` parametric redraws give the restart parameters' intervals (0: none).
    ``aux_series``: where the passes and the init coupling are fitted from (default: ``series``)."""
    aux = series if aux_series is None else aux_series
    pass_sd, pass_ci, dof = fit_pass_sd(aux, pass_tau_s)
    base = DriftParams(level_sd=0.0, level_tau_s=600.0, restart_sd=0.0, pass_sd=pass_sd, pass_tau_s=pass_tau_s)
    level_sd, tau, restart_sd = fit_restarts(series, base)
    init = fit_init(aux, dataclasses.replace(base, level_sd=level_sd, restart_sd=restart_sd))
    params = dataclasses.replace(base, level_sd=level_sd, level_tau_s=tau, restart_sd=restart_sd,
                                 init_coupling=init.get("init_coupling", 0.0), init_sd=init.get("init_sd", 0.0))
    intervals: dict[str, tuple[float, float]] = {"pass_sd": pass_ci}
    if bootstrap:
        rng = np.random.default_rng(seed)
        starts = [(level_sd, tau, restart_sd), (0.08, 60.0, 0.02), (0.08, 6000.0, 0.02)]
        draws = np.array([fit_restarts(series, params, simulate_series(series, params, rng), starts)
                          for _ in range(bootstrap)])
        for j, name in enumerate(("level_sd", "level_tau_s", "restart_sd")):
            intervals[name] = (float(np.percentile(draws[:, j], 2.5)), float(np.percentile(draws[:, j], 97.5)))
        # What the data pin down better than sd and tau apart: a restart's total sd and two restarts' correlation.
        redrawn = (dataclasses.replace(params, level_sd=a, level_tau_s=b, restart_sd=c) for a, b, c in draws)
        derived = [_derived(q) for q in redrawn]
        for j, name in enumerate(DERIVED):
            col = [d[j] for d in derived]
            intervals[name] = (float(np.percentile(col, 2.5)), float(np.percentile(col, 97.5)))
    return FitResult(params, intervals, len(series), sum(len(s.obs) for s in series), dof, init)


def render(fit: FitResult, series: Sequence[Series]) -> str:
    p = fit.params
    lines = [f"{fit.restarts} warm restarts in {fit.series} sessions; {fit.pass_dof} pass degrees of freedom", "",
             "| parameter | fitted | 95% interval |", "|---|---|---|"]
    def interval(name: str) -> str:
        if name not in fit.intervals:
            return "(no bootstrap)"
        lo, hi = fit.intervals[name]
        return f"[{lo:.3g}, {hi:.3g}]"

    for name in ("level_sd", "level_tau_s", "restart_sd", "pass_sd"):
        lines.append(f"| {name} | {getattr(p, name):.3g} | {interval(name)} |")
    lines.append(f"| pass_tau_s | {p.pass_tau_s:.3g} | input (issue 41) |")
    init = fit.init
    if "corr" in init:
        lines.append(f"| init_coupling | {p.init_coupling:.3g} | moments, {int(init['n'])} residuals, "
                     f"corr {init['corr']:.2f} |")
        lines.append(f"| init_sd | {p.init_sd:.3g} | moments |")
    for name, value in zip(DERIVED, _derived(p)):
        lines.append(f"| {name} (derived) | {value:.3g} | {interval(name)} |")
    lines += ["", "sessions: " + ", ".join(f"{s.name} ({len(s.obs)})" for s in series)]
    return "\n".join(lines)


def fit_preset(name: str, root: str = ROOT, bootstrap: int = 0, seed: int = 0) -> tuple[FitResult, list[Series]]:
    """Refit the preset ``name`` (or ``studies``: every recorded study without issue 41) from the recorded sessions
    it names in :data:`PRESET_SESSIONS`; passes and the init coupling from :data:`PASS_SESSIONS` (``studies``: from
    every recorded session)."""
    every = load_series(root)
    names = PRESET_SESSIONS.get(name)
    series = [s for s in every if (s.name in names if names is not None else not s.name.startswith("issue41"))]
    aux = every if names is None else [s for s in every if s.name in PASS_SESSIONS]
    return fit_drift(series, bootstrap, seed, aux_series=aux), series


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.bench.drift", description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=ROOT, help="where the recorded studies are (default: docs/measurements)")
    parser.add_argument("--bootstrap", type=int, default=200, help="parametric redraws for the intervals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sessions", choices=(*PRESET_SESSIONS, "studies"), nargs="+", default=list(PRESET_SESSIONS),
                        help="what to fit: a preset's sessions, or every recorded study without issue 41 "
                             "(default: every preset)")
    args = parser.parse_args(argv)
    if args.bootstrap < 0:
        print("autotune.bench.drift: error: --bootstrap must be >= 0", file=sys.stderr)
        return 2
    for name in args.sessions:
        fit, series = fit_preset(name, args.root, args.bootstrap, args.seed)
        sys.stdout.write(f"## {name}\n\n{render(fit, series)}\n")
        if name in PRESETS:
            sys.stdout.write(f"\npreset {name} in autotune/engines/drift.py: {encode(PRESETS[name])}\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
