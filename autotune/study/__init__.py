"""The study: an Optuna ask/tell loop over fresh-restart trials, then verification of the best against the baseline."""

from autotune.study._loop import (
    BudgetTooSmall,
    Interrupted,
    prepare_study,
    run_study,
    smallest_restart_budget,
)
from autotune.study.options import StudyOptions

__all__ = ["BudgetTooSmall", "Interrupted", "StudyOptions", "prepare_study", "run_study", "smallest_restart_budget"]
