"""The stored keys: every name autotune gives a user attribute in a study's Optuna storage, with one owner (here).

Like Optuna's own ``_CONSTRAINTS_KEY = "tpe:constraints"``, each fact has one namespaced constant; only
:mod:`autotune.store.ledger` reads and writes them (tests/test_architecture.py checks that no other module spells
a key). Adding a key: a constant here, then a writer and a reader on :class:`~autotune.store.ledger.Ledger`. Old
studies simply do not have it; the reader returns its default.
"""

from __future__ import annotations

#: The schema this code writes. Bump it when a stored shape changes incompatibly, and keep reading the old one.
SCHEMA_VERSION = 1
_NAMESPACE = "autotune:"

# -- study user attributes -------------------------------------------------------------------------------
_SCHEMA_KEY = "autotune:schema_version"
#: The study's metadata (:class:`StudyMeta`), written once when the study starts.
_META_KEY = "autotune:meta"
#: The search space file's text, as the study first ran it.
_SPACE_YAML_KEY = "autotune:space_yaml"
#: The baselines and ``--enqueue`` configurations are queued once per study.
_BASELINES_ENQUEUED_KEY = "autotune:baselines_enqueued"
#: Why the search stopped before its trial count (space exhausted), if it did.
_SEARCH_STOPPED_KEY = "autotune:search_stopped"
#: Why the search ended, with the numbers (:class:`~autotune.store.search_end.SearchEnd`); the latest end wins.
_SEARCH_END_KEY = "autotune:search_end"
#: The search of a study with verification is over: no worker starts a new search trial (retries of a dead
#: worker's trials still run). Set by the first worker that finds nothing left to start and nothing running;
#: verification chooses its configurations after it.
_SEARCH_CLOSED_KEY = "autotune:search_closed"
#: The configurations chosen for verification, fixed once chosen so a resume verifies the same ones.
_VERIFY_CANDIDATES_KEY = "autotune:verify_candidates"
#: The sequential verification design, fixed at its first look (:class:`~autotune.decisions.sequential.SequentialPlan`).
_VERIFY_SEQUENTIAL_KEY = "autotune:verify_sequential"
#: Verification's restarts per side, planned from the search's noise when verification started
#: (:class:`~autotune.decisions.planning.RestartPlan`).
_VERIFY_PLAN_KEY = "autotune:verify_plan"
#: How many times a resume with a larger budget extended a concluded, open verification.
_VERIFY_EXTENSION_KEY = "autotune:verify_extension"
#: Verification restarts run so far: config key -> list of restart dicts, saved after every restart.
_VERIFY_PROGRESS_KEY = "autotune:verify_progress"
#: The finished verification (:class:`~autotune.decisions.verification.Verification`).
_VERIFICATION_KEY = "autotune:verification"
#: What the study measures (:class:`~autotune.store.fingerprint.Fingerprint`): a resume must measure the same thing.
_FINGERPRINT_KEY = "autotune:fingerprint"
#: What the study's own cold/warm pairs say about cold starts (:class:`~autotune.stats.coldstart.ColdVerdict`): whether
#: a cold start whose warm-up converged counts. ``differ`` is final once stored.
_COLD_STARTS_KEY = "autotune:cold_starts"
#: The MLflow parent run of the study, so a resumed study continues the same run.
_MLFLOW_PARENT_RUN_KEY = "autotune:mlflow_parent_run_id"
#: A random id written once by the process that created the study; MLflow finds the study's parent run by it
#: (a name can be reused after ``--fresh``, and Optuna's own study id differs between storages).
_STUDY_UID_KEY = "autotune:study_uid"
#: Every ``autotune recheck`` of the study, oldest first (:class:`~autotune.decisions.recheck.RecheckRecord` dicts);
#: the study's own verification is never changed by one.
_RECHECKS_KEY = "autotune:rechecks"

# -- trial user attributes -------------------------------------------------------------------------------
#: The configuration the trial ran (:class:`~autotune.core.records.EngineConfig`).
_CONFIG_KEY = "autotune:config"
#: :meth:`EngineConfig.key`, for finding repeats of a configuration.
_CONFIG_ID_KEY = "autotune:config_key"
_LABEL_KEY = "autotune:label"
#: Every restart of the trial (cold and failed ones included), saved as each one lands.
_RESTARTS_KEY = "autotune:restarts"
#: The trial's :class:`~autotune.stats.intervals.TrialSummary`.
_SUMMARY_KEY = "autotune:summary"
_RESOLVED_DIFFERS_KEY = "autotune:resolved_differs"
_DIFFERENCES_KEY = "autotune:differences"
#: One-line reason a trial failed.
_FAILURE_KEY = "autotune:failure"
#: One-line reason a trial was raced out.
_PRUNED_REASON_KEY = "autotune:pruned_reason"
#: The trial was cut short (Ctrl-C, SIGTERM, kill -9) and its parameters queued again.
_INTERRUPTED_KEY = "autotune:interrupted"
#: The sampler suggested a configuration the space rules out; nothing ran.
_INFEASIBLE_KEY = "autotune:infeasible"
#: The trial repeated an earlier trial's configuration; it was told that trial's result and ran nothing.
_DUPLICATE_OF_KEY = "autotune:duplicate_of"
#: Who runs the trial (or holds the claim): host, pid, machine, worker index, GPUs (:func:`owner_id`).
_OWNER_KEY = "autotune:owner"
#: Engine starts the trial may reach: those it ran plus those it may still run. Workers hold the difference back
#: from each other's budget, so several workers never start more than the budget between them.
_PLANNED_STARTS_KEY = "autotune:planned_starts"

# -- claims: a companion study whose trials say which worker does a job that must run once ----------------
#: Suffix of the companion study holding a study's claims (hidden from study listings).
CLAIMS_SUFFIX = ":autotune-claims"
#: The job a claim trial is for (see :mod:`autotune.store.claims`).
CLAIM_JOB_KEY = "autotune:claim"
CLAIM_OWNER_KEY = _OWNER_KEY
#: What a claim's holder ran for its job (a verification round's restarts).
CLAIM_RESTARTS_KEY = _RESTARTS_KEY
#: Jobs: creating the MLflow parent run, each verification round, concluding the verification.
MLFLOW_PARENT_JOB = "mlflow-parent"
VERIFY_CONCLUDE_JOB = "verify-conclude"
#: Without verification: closing the study once its search of this many finished trials is over.
FINISH_JOB = "finish-after-{}-trials"
_VERIFY_ROUND_JOB = "verify-round-{}"
#: The n-th redo, after the verification concluded, of round restarts a transient fault (a guard trip) cost and
#: nothing ran again, and a new conclusion (issue 32); each of its restarts belongs to the round it ran for.
VERIFY_REDO_JOB = "verify-redo-{}"
#: Running again, after the verification concluded, restarts of its rounds that a transient fault (a guard trip)
#: cost and nothing ran again, then concluding anew (issue 32): the n-th such job. Its restarts belong to the round
#: each was run for (their ``restart``).
_VERIFY_REDO_JOB = "verify-redo-{}"
#: Queuing again a trial that was failed for a dead worker but whose retry was never queued (the process failing it
#: died in between, e.g. on a full disk: issue 22, FS01).
_REQUEUE_JOB = "requeue-trial-{}"
#: Latency over the trial's counted restarts: key (``tpot_p99_ms``...) -> :class:`~autotune.stats.latency.LatencyStat`.
_LATENCY_KEY = "autotune:latency"
#: Each SLO limit against the trial's latency (:class:`~autotune.stats.latency.SloCheck`), when the space sets limits.
_SLO_CHECKS_KEY = "autotune:slo_checks"


def bare(key: str) -> str:
    """``key`` as a schema-0 study (written before keys were namespaced) stores it."""
    return key[len(_NAMESPACE):] if key.startswith(_NAMESPACE) else key
