"""A drifting machine (issue 41): the noise of restarts measured on a real GPU host, as a seedable generator.

In log throughput, a restart of a configuration with median ``m`` whose timed window starts at wall time ``t``::

    log y_pass_j = log m + L(t_j) + r + F_j
    y            = mean_j y_pass_j                      (a restart's value: the mean of its timed passes)

* ``L(t)`` is the machine's level: a stationary Ornstein-Uhlenbeck process in wall time (sd ``level_sd``,
  correlation time ``level_tau_s``), the same for every configuration at one moment: two restarts a minute apart
  see nearly the same level, two an hour apart independent ones. ``shift_per_hour`` adds an optional deterministic
  slow shift (0 in every preset: not identified by the recorded data).
* ``r`` is the per-restart component (sd ``restart_sd``): what a fresh engine start adds on top of the level.
* ``F`` is the machine's fast wander inside one engine, a second OU process (correlation time ``pass_tau_s``,
  seconds) averaged over each pass: ``pass_sd`` is the sd of one pass of ``pass_ref_s`` seconds; shorter passes vary
  more, longer ones less, and adjacent passes correlate (:class:`PassChain` draws the window means exactly).
* With ``init_coupling`` the engine's start-up seconds follow the same machine speed:
  ``log init = log init_nominal - init_coupling * (L + r) + N(0, init_sd)``: a slow host inits slowly (issue 41:
  r = -0.78 between init seconds and throughput).

:data:`PRESETS` holds the parameters fitted from the restarts recorded on real GPUs (``python -m
autotune.bench.drift``; ``docs/simulator.md``, "A drifting machine (issue 41)"). :class:`DriftNoise` draws restarts
for a caller with a clock (the simulator's simulated wall time, a replay's schedule); :func:`drift_scenario` lays a
whole study out in time: search restarts spaced by their costs, verification rounds with both sides adjacent.
The level path is a pure function of the seed and the time (drawn on a grid, extended as time grows), so the
order in which restarts are asked for does not change the machine, and two callers with one seed share one machine.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.signal import lfilter

__all__ = ["PRESETS", "DriftNoise", "DriftParams", "DriftScenario", "PassChain", "RestartDraw", "ScenarioRestart",
           "drift_scenario", "window_g"]

#: Grid points per level correlation time: the level is linear between them (a variance loss below 1%).
GRID_PER_TAU = 100
#: Grid points drawn at a time when the level path is extended.
GRID_BLOCK = 4096


def window_g(x: float) -> float:
    """Variance of the mean of a unit-variance OU process over a window of ``x`` correlation times."""
    if x < 1e-6:
        return 1.0
    return 2.0 * (x - 1.0 + math.exp(-x)) / (x * x)


@dataclasses.dataclass(frozen=True)
class DriftParams:
    """A drifting machine's noise, in log throughput (``0.10`` is about 10%).

    Attributes:
        level_sd: Sd of the machine's level ``L(t)``.
        level_tau_s: Correlation time of the level, seconds: restarts ``dt`` apart share ``exp(-dt/tau)`` of it.
        restart_sd: Sd of the per-restart component.
        pass_sd: Sd of one timed pass of ``pass_ref_s`` seconds (the fast wander inside one engine).
        pass_tau_s: Correlation time of the fast wander, seconds.
        pass_ref_s: The pass length ``pass_sd`` is stated for.
        shift_per_hour: A deterministic slow level shift, log per hour (0: none).
        init_coupling: How strongly log start-up seconds follow the machine's slowness (0: not at all).
        init_sd: Sd of log start-up seconds not explained by the machine's speed.
    """

    level_sd: float
    level_tau_s: float
    restart_sd: float
    pass_sd: float
    pass_tau_s: float
    pass_ref_s: float = 5.0
    shift_per_hour: float = 0.0
    init_coupling: float = 0.0
    init_sd: float = 0.0

    def __post_init__(self) -> None:
        for name in ("level_sd", "restart_sd", "pass_sd", "init_coupling", "init_sd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 5.0):
                raise ValueError(f"drift {name} must be a number from 0 to 5, got {value!r}")
        for name in ("level_tau_s", "pass_tau_s", "pass_ref_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 < value <= 1e7):
                raise ValueError(f"drift {name} must be a number of seconds over 0, got {value!r}")
        if not math.isfinite(self.shift_per_hour):
            raise ValueError(f"drift shift_per_hour must be finite, got {self.shift_per_hour!r}")

    @property
    def fast_sd(self) -> float:
        """Sd of the instantaneous fast wander (``pass_sd`` is its mean over ``pass_ref_s`` seconds)."""
        return self.pass_sd / math.sqrt(window_g(self.pass_ref_s / self.pass_tau_s))

    def pass_sd_at(self, seconds: float) -> float:
        """Sd of one pass of ``seconds``."""
        return self.fast_sd * math.sqrt(window_g(seconds / self.pass_tau_s))

    def window_var(self, seconds: float) -> float:
        """Variance of a restart's mean over a timed window of ``seconds`` (its passes back to back)."""
        return self.pass_sd_at(seconds) ** 2

    def restart_var(self, timed_s: float) -> float:
        """Variance of one restart's log value around its configuration's median (level included)."""
        return self.level_sd ** 2 + self.restart_sd ** 2 + self.window_var(timed_s)

    def correlation(self, dt_s: float, timed_s: float) -> float:
        """Correlation of the log values of two restarts ``dt_s`` apart, each over ``timed_s`` timed seconds."""
        return self.level_sd ** 2 * math.exp(-abs(dt_s) / self.level_tau_s) / self.restart_var(timed_s)

    def diff_sd(self, dt_s: float, timed_s: float) -> float:
        """Sd of the log ratio of two restarts of one configuration ``dt_s`` apart (each ``timed_s`` timed): what a
        paired comparison at that distance in time meets. Better determined by short sessions than ``level_sd`` and
        ``level_tau_s`` apart (they see the level's slope, ``level_sd**2 / level_tau_s``, more than its size)."""
        level = self.level_sd ** 2 * (1.0 - math.exp(-abs(dt_s) / self.level_tau_s))
        return math.sqrt(2.0 * (level + self.restart_sd ** 2 + self.window_var(timed_s)))


#: Named machines, fitted by ``python -m autotune.bench.drift`` (``make bench-drift``) from restarts recorded on real
#: GPUs; the fits, their 95% intervals and which parts are empirical choices are in ``docs/simulator.md``, "A
#: drifting machine". ``h100``: issue 41's 16 H100 verification restarts (level and restart parts); ``pooled``:
#: those and every study under ``docs/measurements/`` (11 sessions, H100 and H200). Both take the pass wander and
#: the init coupling from the recorded studies' passes and start-up seconds (issue 41's file has neither), and the
#: pass wander's correlation time from issue 41's vLLM-only measurement.
PRESETS: dict[str, DriftParams] = {
    "h100": DriftParams(level_sd=0.0923, level_tau_s=105.0, restart_sd=0.0, pass_sd=0.0910, pass_tau_s=2.91,
                        init_coupling=0.796, init_sd=0.197),
    "pooled": DriftParams(level_sd=0.0779, level_tau_s=130.0, restart_sd=0.0620, pass_sd=0.0910, pass_tau_s=2.91,
                          init_coupling=0.796, init_sd=0.197),
}


class PassChain:
    """The fast wander over one engine's back-to-back passes: each :meth:`next` is the exact mean of the OU
    process over the next window, given where the previous window left it (windows may differ in length)."""

    def __init__(self, params: DriftParams, gauss: Callable[[], float]) -> None:
        self.tau = params.pass_tau_s
        self.sd = params.fast_sd
        self.gauss = gauss
        self.state = self.sd * gauss()  # the process where the next window starts (stationary)

    def next(self, seconds: float) -> float:
        """The log multiplier of one pass of ``seconds``."""
        x = max(seconds, 1e-9) / self.tau
        e = math.exp(-x)
        b = (1.0 - e) / x                       # E[mean | start] = b * start
        v_mean = max(window_g(x) - b * b, 0.0)  # Var[mean | start]
        v_end = 1.0 - e * e                     # Var[end | start]
        cov = b * (1.0 - e)                     # Cov[mean, end | start]
        z1, z2 = self.gauss(), self.gauss()
        mean_dev = math.sqrt(v_mean) * z1
        # The end given the mean (a 2x2 Cholesky): exact joint draw of (mean, end).
        slope = cov / v_mean if v_mean > 1e-15 else 0.0
        end_dev = slope * mean_dev + math.sqrt(max(v_end - slope * cov, 0.0)) * z2
        start = self.state
        self.state = start * e + self.sd * end_dev
        return start * b + self.sd * mean_dev


@dataclasses.dataclass(frozen=True)
class RestartDraw:
    """One restart drawn on the machine: its value (mean of its passes, tok/s), its passes, its start-up seconds
    (``None`` when none was asked for), and the machine's log level during its timed window."""

    value: float
    passes: tuple[float, ...]
    init_s: float | None
    level: float


def _generator(seed: Any) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


class DriftNoise:
    """Restarts on a drifting machine.

    Args:
        params: The machine (a :data:`PRESETS` entry or fitted :class:`DriftParams`).
        seed: An integer, a sequence of integers, or a ``numpy.random.Generator``: the machine's level path and
            the restarts' own draws (kept apart, so asking for more restarts never moves the level).
    """

    def __init__(self, params: DriftParams, seed: Any = None) -> None:
        self.params = params
        root = _generator(seed)
        self._path_rng = np.random.default_rng(root.integers(0, 2**63))
        self.rng = np.random.default_rng(root.integers(0, 2**63))
        self._step = params.level_tau_s / GRID_PER_TAU
        self._a = math.exp(-self._step / params.level_tau_s)
        self._grid = np.empty(0)

    def _extend(self, upto: int) -> None:
        n = max(upto + 1 - self._grid.size, 0)
        if not n:
            return
        n = GRID_BLOCK * math.ceil(n / GRID_BLOCK)
        sd = self.params.level_sd
        e = self._path_rng.standard_normal(n)
        if self._grid.size == 0:
            first = sd * e[0]
            rest = lfilter([sd * math.sqrt(1 - self._a ** 2)], [1.0, -self._a], e[1:], zi=[self._a * first])[0]
            block = np.concatenate(([first], rest))
        else:
            block = lfilter([sd * math.sqrt(1 - self._a ** 2)], [1.0, -self._a], e, zi=[self._a * self._grid[-1]])[0]
        self._grid = np.concatenate((self._grid, block))

    def level(self, t_s: float) -> float:
        """The machine's log level at wall time ``t_s`` (seconds from the machine's start, >= 0)."""
        if not (math.isfinite(t_s) and t_s >= 0.0):
            raise ValueError(f"a drifting machine's time must be a number of seconds >= 0, got {t_s!r}")
        pos = t_s / self._step
        i = int(pos)
        self._extend(i + 1)
        frac = pos - i
        return float(self._grid[i] * (1.0 - frac) + self._grid[i + 1] * frac
                     + self.params.shift_per_hour * t_s / 3600.0)

    def levels(self, times_s: Sequence[float]) -> np.ndarray:
        """:meth:`level` at each of ``times_s``."""
        return np.array([self.level(t) for t in times_s])

    def init_factor(self, slowness: float, gauss: Callable[[], float]) -> float:
        """The factor on start-up seconds of a start whose machine runs at log level ``slowness`` (L + r)."""
        p = self.params
        return math.exp(-p.init_coupling * slowness + p.init_sd * gauss())

    def restart(self, median: float, t_start_s: float, duration_s: float, n_passes: int,
                init_s: float | None = None, *, rng: np.random.Generator | random.Random | None = None
                ) -> RestartDraw:
        """One restart whose timed window of ``duration_s`` seconds (``n_passes`` passes back to back) starts at
        ``t_start_s``, of a configuration whose median tok/s on a machine at level 0 is ``median``.

        ``init_s``: the configuration's nominal start-up seconds, returned moved by the machine's speed (with
        ``init_coupling``). ``rng``: the restart's own draws (default: this machine's restart generator).
        """
        if n_passes < 1 or not (duration_s > 0 and math.isfinite(duration_s)):
            raise ValueError(f"a restart needs n_passes >= 1 and duration_s > 0, got {n_passes!r}, {duration_s!r}")
        gauss = _gauss_of(self.rng if rng is None else rng)
        p = self.params
        pass_s = duration_s / n_passes
        r = p.restart_sd * gauss()
        chain = PassChain(p, gauss)
        logs = [self.level(t_start_s + (j + 0.5) * pass_s) + r + chain.next(pass_s) for j in range(n_passes)]
        passes = tuple(median * math.exp(x) for x in logs)
        level = self.level(t_start_s + duration_s / 2.0)
        init = None if init_s is None else init_s * self.init_factor(level + r, gauss)
        return RestartDraw(sum(passes) / n_passes, passes, init, level)


def _gauss_of(rng: np.random.Generator | random.Random) -> Callable[[], float]:
    if isinstance(rng, random.Random):
        return lambda: rng.gauss(0.0, 1.0)
    return lambda: float(rng.standard_normal())


@dataclasses.dataclass(frozen=True)
class ScenarioRestart:
    """One restart of a drawn study: which configuration, when, in which phase (``search``/``verify``) and round
    (verification; ``-1`` in the search), and what it measured."""

    config: Hashable
    t_s: float
    phase: str
    round: int
    value: float
    passes: tuple[float, ...]
    init_s: float | None


class DriftScenario:
    """Configurations with known medians on one drifting machine, drawn in time order.

    :meth:`draw` is one restart at a time; :meth:`study` lays a whole study out (search restarts back to back
    at their costs, then verification rounds with every side of a round adjacent in time, order shuffled within
    each round). The machine's level is a function of time alone, so a policy that asks for restarts in another
    order, or more of them, meets the same machine.
    """

    def __init__(self, medians: Mapping[Hashable, float], params: DriftParams, seed: Any = None, *,
                 timed_s: float = 10.0, n_passes: int = 2, restart_s: float = 60.0,
                 init_s: float | None = None) -> None:
        self.medians = dict(medians)
        self.params = params
        self.noise = DriftNoise(params, seed)
        self.timed_s, self.n_passes, self.restart_s, self.init_s = timed_s, n_passes, restart_s, init_s
        #: Where :meth:`run` draws its next restart (seconds): a replay's engine runs restarts back to back.
        self.clock_s = 0.0

    @property
    def effect(self) -> float:
        """The challenger's true speedup over the baseline (ratio of medians), when both are named so."""
        return self.medians["challenger"] / self.medians["baseline"]

    @property
    def pass_s(self) -> float:
        """One timed pass, seconds."""
        return self.timed_s / self.n_passes

    def restart_cost_s(self, n_passes: int | None = None) -> float:
        """What a restart of ``n_passes`` timed passes costs (default :attr:`n_passes`): the start before its window,
        then the window."""
        n = self.n_passes if n_passes is None else n_passes
        return max(self.restart_s - self.timed_s, 0.0) + n * self.pass_s

    def draw(self, config: Hashable, t_s: float, n_passes: int | None = None) -> RestartDraw:
        """One restart of ``config`` whose engine starts at ``t_s``; its timed window of ``n_passes`` passes
        (default :attr:`n_passes`) ends the restart."""
        try:
            median = self.medians[config]
        except KeyError:
            raise KeyError(f"no configuration {config!r} in this scenario; it has {sorted(map(str, self.medians))}")
        n = self.n_passes if n_passes is None else n_passes
        start = t_s + max(self.restart_s - self.timed_s, 0.0)
        return self.noise.restart(median, start, n * self.pass_s, n, self.init_s)

    def run(self, config: Hashable, cost_s: float | None = None, n_passes: int | None = None) -> RestartDraw:
        """One restart of ``config`` at :attr:`clock_s`, which then moves on by ``cost_s`` (default: what a restart
        of ``n_passes`` costs): what a replay's fake engine calls from ``run_restart``."""
        draw = self.draw(config, self.clock_s, n_passes)
        self.clock_s += self.restart_cost_s(n_passes) if cost_s is None else float(cost_s)
        return draw

    def study(self, search: Sequence[tuple[Hashable, float]], rounds: int,
              sides: Sequence[Hashable] = ("challenger", "baseline"), *, t0_s: float = 0.0,
              shuffle: bool = True) -> list[ScenarioRestart]:
        """A study in time order: ``search`` is (configuration, cost in seconds) per search restart, run back to
        back (a configuration not in the scenario still spends its time); then ``rounds`` verification rounds of
        ``sides``, each restart ``restart_s`` long."""
        out: list[ScenarioRestart] = []
        t = t0_s
        for config, cost in search:
            if config in self.medians:
                d = self.draw(config, t)
                out.append(ScenarioRestart(config, t, "search", -1, d.value, d.passes, d.init_s))
            t += float(cost)
        for rnd in range(rounds):
            order = list(sides)
            if shuffle:
                order = [order[i] for i in self.noise.rng.permutation(len(order))]
            for config in order:
                d = self.draw(config, t)
                out.append(ScenarioRestart(config, t, "verify", rnd, d.value, d.passes, d.init_s))
                t += self.restart_s
        return out


def drift_scenario(effect: float = 1.13, params: DriftParams | None = None, seed: Any = None, *,
                   baseline: float = 3000.0, **kwargs: Any) -> DriftScenario:
    """Issue 41's scenario: a ``challenger`` ``effect`` times faster than a ``baseline`` of ``baseline`` tok/s on a
    drifting machine (default: the ``h100`` preset). ``kwargs`` go to :class:`DriftScenario` (``timed_s``,
    ``n_passes``, ``restart_s``, ``init_s``)."""
    if not (effect > 0 and math.isfinite(effect)):
        raise ValueError(f"effect must be a ratio over 0, got {effect!r}")
    return DriftScenario({"baseline": baseline, "challenger": baseline * effect}, params or PRESETS["h100"], seed,
                         **kwargs)
