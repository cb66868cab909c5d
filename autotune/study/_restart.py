"""One counted restart of a configuration: the only place the study starts an engine.

Lives in the study, not in :mod:`autotune.stats`: it runs the engine, while the statistics only read what it returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from autotune.core.records import EngineConfig, RestartResult, Workload
from autotune.core.secrets import MissingSecret, resolve_config, resolve_workload
from autotune.core.transient import TRANSIENT_RUNS_AGAIN, is_transient
from autotune.engines import EngineError, RestartEngine
from autotune.store.claims import StartTokens

__all__ = ["ALWAYS_COLD", "measure_restart"]

#: Why a restart fails when the engine calls its second start of one configuration and seed cold again.
ALWAYS_COLD = ("engine reported a cold start twice in a row for the same configuration and seed: its cold flag never "
               "clears (a compile cache that is not kept between restarts?), so no restart could be counted")


def measure_restart(
    engine: RestartEngine,
    config: EngineConfig,
    workload: Workload,
    *,
    restart: int,
    seed: int,
    on_result: Callable[[RestartResult], None] | None = None,
    rerun_cold: Callable[[RestartResult], bool] | None = None,
    run_again: Callable[[RestartResult], bool] | None = None,
    tokens: StartTokens | None = None,
) -> list[RestartResult]:
    """One counted restart of ``config``, preceded by a warm-up restart when the engine reports it cold.

    A cold restart (the first start of a configuration, with empty compile caches) ran 30-60% slow on the
    H200. By default it is kept in the record but not counted: the same seed is run again warm, so racing and
    verification compare warm restarts on matched seeds. ``rerun_cold`` (given the cold result) may say no: the
    search does when its cold starts count (:mod:`autotune.stats.coldstart`), when the cold start alone shows the
    configuration cannot be the best, or when the budget has no room for the rerun; the caller reads the last
    result's ``cold`` flag to tell.

    Each restart is scored under the workload's objective (:meth:`Workload.scored`) before anyone sees it, so
    racing, verification, tracking and reports all read the objective's value.

    A restart that failed transiently (:func:`autotune.core.transient.is_transient`: the memory guard killed it,
    or it was lost with the forkserver host) is run once more on the same seed when ``run_again`` (given the
    failure, after ``on_result`` saw it) says the budget and the floor rule allow it: the search and verification
    both pass it, so neither loses a configuration, the baseline included, to one passing fault (issue 32).

    With ``tokens`` (the study's :class:`~autotune.store.claims.StartTokens`, under ``--budget-restarts`` or
    ``--budget-minutes``) every engine start first takes a token and reserves its estimated minutes; when the budget
    has no room no engine starts, and what ran so far is returned (empty: nothing ran, the budget is spent).

    Returns:
        The restarts run (one, or a cold one followed by a warm one, and again after a transient failure), in
        order; empty when the start budget had no token left.
    """
    results: list[RestartResult] = []
    for again in range(TRANSIENT_RUNS_AGAIN + 1):
        ran = _start(engine, config, workload, restart=restart, seed=seed, on_result=on_result,
                     rerun_cold=rerun_cold, tokens=tokens)
        results += ran
        if not ran:
            break  # no token: the start budget is spent
        last = results[-1]
        if again == TRANSIENT_RUNS_AGAIN or not is_transient(last) or run_again is None or not run_again(last):
            break
    return results


def _start(engine: RestartEngine, config: EngineConfig, workload: Workload, *, restart: int, seed: int,
           on_result: Callable[[RestartResult], None] | None,
           rerun_cold: Callable[[RestartResult], bool] | None,
           tokens: StartTokens | None = None) -> list[RestartResult]:
    """One counted restart, preceded by a warm-up restart when the engine reports it cold (see above)."""
    results = []
    # The engine is started with the credentials the configuration references (``${HF_TOKEN}``), resolved from
    # the environment now; the configuration the study stores and reports keeps the references.
    try:
        started = resolve_config(config)
        workload = resolve_workload(workload) if isinstance(workload, Workload) else workload
    except MissingSecret as exc:
        raise EngineError(str(exc)) from None
    for attempt in range(2):
        token = None if tokens is None else tokens.take(config.key())
        if tokens is not None and token is None:
            break  # every start the budget allows is taken: this one is not started
        try:
            result = engine.run_restart(started, workload, restart=restart, seed=seed)
        except BaseException:
            if token is not None:
                with contextlib.suppress(Exception):
                    token.give_up()  # nothing recorded: the next start may have the token
            raise
        if token is not None:
            # Before the restart is recorded: a death in between under-uses the budget by one start (and its minutes).
            token.complete(float(result.wall_s or 0.0) / 60.0)
        if hasattr(engine, "learn_noise"):
            engine.learn_noise(result)  # the warm-up noise prior the engine's next restarts warm up by
        if isinstance(workload, Workload):
            result = workload.scored(result)
        if attempt and result.ok and result.cold:
            # A second start of the same configuration and seed cannot be cold unless the engine's cold flag never
            # clears: nothing it reports would ever count, so say so rather than fail every trial without a reason.
            result = dataclasses.replace(result, status="failed", error=ALWAYS_COLD)
        results.append(result)
        if on_result is not None:
            on_result(result)
        if not (result.ok and result.cold) or (rerun_cold is not None and not rerun_cold(result)):
            break
    return results

