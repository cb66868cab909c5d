"""Would a control measured through the search pay on this machine? (issue 41, item 2)

Issue 41 asks that the baseline be measured again at intervals during the search, so that every configuration is
judged against a control near it in time. Whether that helps is a question of the machine's noise, and it can be
answered before anything is built: a configuration measured at ``t`` and adjusted by a control measured ``delta``
seconds before it carries the control's own noise as well as its own, and gets rid of the machine's level only as
far as the level at ``t - delta`` still predicts the level at ``t``.

For two configurations measured ``sep`` seconds apart (what racing and the sampler compare: ten minutes, the mean
distance of two moments of a 30-minute search), on a machine whose log level is an Ornstein-Uhlenbeck process
(sd ``s_L``, correlation time ``tau``, covariance ``C(s) = s_L^2 exp(-s / tau)``) and whose restarts carry their own
noise ``s_own`` (the timed window's fast wander and a per-restart part):

* compared raw, the log ratio's variance is ``2 (C(0) - C(sep)) + 2 s_own^2``;
* each adjusted by its control, it is ``4 (C(0) - C(delta)) - 2 (2 C(sep) - C(sep - delta) - C(sep + delta))
  + 4 s_own^2``: the control removes the level only as far as it is remembered ``delta`` later, and doubles the
  restarts' own noise.

Far apart, the control pays only when ``s_L^2 (2 exp(-delta / tau) - 1) > s_own^2``: when the level is larger than
a restart's own noise and still remembered ``delta`` later. This prints, for each machine fitted from real GPUs
(:data:`autotune.engines.drift.PRESETS`) and for a machine whose level is larger and slower (an illustration, not a
fit), the variance ratio at several spacings and the largest spacing at which the control pays, checked by drawing
restarts from :class:`autotune.engines.drift.DriftNoise` itself::

    python -m autotune.bench.control
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from typing import IO

import numpy as np

from autotune.engines.drift import PRESETS, DriftNoise, DriftParams

__all__ = ["adjusted_var", "break_even_s", "drawn_vars", "main", "raw_var"]

#: A restart's timed window on the drifting machines (two 5-s passes, as the replay's search runs them).
TIMED_S = 10.0
#: How far apart in time the two compared configurations were measured, seconds.
SEPARATION_S = 600.0
#: Spacings of a control before the configuration it adjusts, seconds (a warm restart takes 36-60 s on the H100).
SPACINGS_S = (30.0, 60.0, 120.0, 300.0, 600.0)
#: A machine whose level is larger than the fitted ones' and moves over ten minutes: an illustration of where a control
#: pays (not fitted to any record).
LARGER = DriftParams(level_sd=0.15, level_tau_s=600.0, restart_sd=0.0, pass_sd=0.091, pass_tau_s=2.91)


def _own_var(params: DriftParams, timed_s: float) -> float:
    return params.restart_sd ** 2 + params.window_var(timed_s)


def _cov(params: DriftParams, lag_s: float) -> float:
    return params.level_sd ** 2 * math.exp(-abs(lag_s) / params.level_tau_s)


def raw_var(params: DriftParams, sep_s: float = SEPARATION_S, timed_s: float = TIMED_S) -> float:
    """Variance of the log ratio of two restarts ``sep_s`` apart, compared raw."""
    return 2.0 * (_cov(params, 0.0) - _cov(params, sep_s)) + 2.0 * _own_var(params, timed_s)


def adjusted_var(params: DriftParams, delta_s: float, sep_s: float = SEPARATION_S, timed_s: float = TIMED_S) -> float:
    """Variance of the same log ratio with each restart adjusted by a control measured ``delta_s`` before it."""
    c = functools.partial(_cov, params)
    level = 4.0 * (c(0.0) - c(delta_s)) - 2.0 * (2.0 * c(sep_s) - c(sep_s - delta_s) - c(sep_s + delta_s))
    return level + 4.0 * _own_var(params, timed_s)


def break_even_s(params: DriftParams, sep_s: float = SEPARATION_S, timed_s: float = TIMED_S) -> float:
    """The largest spacing, up to ``sep_s``, at which a control pays (0: at none), to the second."""
    pays = [d for d in np.arange(1.0, sep_s + 1.0) if adjusted_var(params, float(d), sep_s, timed_s)
            < raw_var(params, sep_s, timed_s)]
    return float(max(pays)) if pays else 0.0


def drawn_vars(params: DriftParams, delta_s: float, pairs: int = 4000, seed: int = 0,
               timed_s: float = TIMED_S) -> tuple[float, float]:
    """``(raw, adjusted)`` variances measured on restarts drawn from :class:`DriftNoise`: two configurations
    :data:`SEPARATION_S` apart, each with its control ``delta_s`` before it, many such studies."""
    raw, adjusted = [], []
    for i in range(pairs):
        noise = DriftNoise(params, seed=[seed, i])
        t1 = 60.0 + delta_s
        t2 = t1 + SEPARATION_S

        def log_value(t: float) -> float:
            return math.log(noise.restart(1000.0, t, timed_s, max(1, round(timed_s / 5.0))).value)

        c1, x1, c2, x2 = log_value(t1 - delta_s), log_value(t1), log_value(t2 - delta_s), log_value(t2)
        raw.append(x1 - x2)
        adjusted.append((x1 - c1) - (x2 - c2))
    return float(np.var(raw, ddof=1)), float(np.var(adjusted, ddof=1))


def main(argv: Sequence[str] | None = None, out: IO[str] = sys.stdout) -> int:
    del argv
    machines = {**{f"{name} (fitted)": p for name, p in PRESETS.items()}, "larger, slower (illustration)": LARGER}
    out.write(f"A restart's own noise over a {TIMED_S:g}-s window, the machine's level, and what a control measured "
              f"delta before each of two configurations {SEPARATION_S:g} s apart does to their log ratio's variance "
              "(adjusted / raw; below 1 the control pays; drawn: 4000 studies on DriftNoise).\n\n")
    out.write("| machine | level sd | level tau | own sd | " + " | ".join(f"delta {d:g} s" for d in SPACINGS_S)
              + " | pays up to |\n")
    out.write("|---|---|---|---|" + "---|" * len(SPACINGS_S) + "---|\n")
    for name, p in machines.items():
        cells = []
        for d in SPACINGS_S:
            drawn_raw, drawn_adj = drawn_vars(p, d)
            cells.append(f"{adjusted_var(p, d) / raw_var(p):.2f} (drawn {drawn_adj / drawn_raw:.2f})")
        even = break_even_s(p)
        out.write(f"| {name} | {p.level_sd:.3f} | {p.level_tau_s:g} s | {math.sqrt(_own_var(p, TIMED_S)):.3f} | "
                  + " | ".join(cells) + f" | {'never' if even == 0 else f'{even:.0f} s'} |\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
