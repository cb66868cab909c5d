"""What a study stores and how workers share it: the ledger (every stored key), claims, heartbeats, the study's
directory and its fingerprint. The only package that touches Optuna's storage internals.

The packages above reach the private modules' few public names here: :data:`TrialRecord` (a trial as the ledger
reads it), :func:`live_holders` (who still runs a study's trials), and the Optuna internals a study needs
(:func:`storage`, :func:`trial_id`, :func:`frozen_trial`), which only :mod:`._optuna` spells.
"""

from autotune.store._liveness import live_holders
from autotune.store._optuna import frozen_trial, storage, trial_id
from autotune.store._trials import TrialRecord

__all__ = ["TrialRecord", "frozen_trial", "live_holders", "storage", "trial_id"]
