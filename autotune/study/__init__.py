"""The study: an Optuna ask/tell loop over fresh-restart trials, then verification of the best against the baseline.

Everything a study learns is in Optuna's storage (SQLite under ``mlruns/`` by default), written as it
happens, so the same command after Ctrl-C or ``kill -9`` resumes: finished trials are kept, a trial whose
process is gone is failed and retried with the restarts it had measured, and verification restarts already run
are not run again.

Several workers (processes, on one machine or many) may run the same study at once, sharing only the storage:
each asks Optuna for its own trials (TPE with ``constant_liar`` keeps them apart), records a heartbeat for the
trial it runs, and fails and retries only trials whose heartbeat went stale. They share the engine-start budget
through the starts each running trial announces. When the search is over, each verification round and the
conclusion are claims (:mod:`autotune.store.claims`): taken by exactly one worker, taken over if it dies.

Inside: ``_run`` (the whole study), ``_open`` (opening, metadata), ``_optimize`` (the search loop), ``_trial`` (one
trial's restarts), ``_restart`` (one restart), ``_budget`` (engine starts), ``_start_design`` (where the search
starts), ``_verification`` (the verification phase), ``_recheck`` (``autotune recheck``), ``_warm_start``
(``tune --warm-start``).
"""

from autotune.study._budget import BudgetTooSmall, StartCosts, smallest_restart_budget
from autotune.study._open import prepare_study
from autotune.study._planning import budget_reach_for
from autotune.study._recheck import RecheckConfigs, RecheckError, RecheckOptions, recheck, recheck_configs
from autotune.study._run import Interrupted, run_study
from autotune.study._memory_rounds import run_verification
from autotune.study._verification import EXTENSION_SHARE
from autotune.study._warm_start import WarmStart, carry_noise, plan_warm_start, warm_start_top
from autotune.study.options import StudyOptions

__all__ = [
    "EXTENSION_SHARE",
    "BudgetTooSmall",
    "Interrupted",
    "RecheckConfigs",
    "RecheckError",
    "RecheckOptions",
    "StartCosts",
    "StudyOptions",
    "WarmStart",
    "budget_reach_for",
    "carry_noise",
    "plan_warm_start",
    "prepare_study",
    "recheck",
    "recheck_configs",
    "run_study",
    "run_verification",
    "smallest_restart_budget",
    "warm_start_top",
]
