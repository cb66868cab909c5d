"""Every stored key, given a value of the wrong type, reads back as one line naming the key and the trial (issue 32,
principle 6: the store tells the truth). The test walks the key constants of ``store/_keys.py`` themselves, so a
key added without a reader here fails it."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

import optuna
import pytest

from autotune.store import _keys
from autotune.store.ledger import CLAIMS_SUFFIX, Ledger, LedgerError

#: Every key constant of ``_keys.py`` (study, trial and claim keys), by value.
ALL_KEYS = sorted({v for k, v in vars(_keys).items() if k.endswith("_KEY") and isinstance(v, str)})

Read = Callable[[Ledger, optuna.trial.FrozenTrial], Any]

#: Study attributes: how the ledger reads each.
STUDY_READERS: dict[str, Read] = {
    _keys._SCHEMA_KEY: lambda ledger, _: Ledger(ledger.study),
    _keys._META_KEY: lambda ledger, _: ledger.meta(),
    _keys._SPACE_YAML_KEY: lambda ledger, _: ledger.space_yaml(),
    _keys._BASELINES_ENQUEUED_KEY: lambda ledger, _: ledger.baselines_enqueued(),
    _keys._SEARCH_STOPPED_KEY: lambda ledger, _: ledger.search_stopped(),
    _keys._SEARCH_END_KEY: lambda ledger, _: ledger.search_end(),
    _keys._SEARCH_CLOSED_KEY: lambda ledger, _: ledger.search_closed(),
    _keys._VERIFY_CANDIDATES_KEY: lambda ledger, _: ledger.verify_candidates(),
    _keys._VERIFY_SEQUENTIAL_KEY: lambda ledger, _: ledger.verify_sequential(),
    _keys._VERIFY_PLAN_KEY: lambda ledger, _: ledger.verify_plan(),
    _keys._VERIFY_EXTENSION_KEY: lambda ledger, _: ledger.verify_extension(),
    _keys._VERIFY_PROGRESS_KEY: lambda ledger, _: ledger.verify_progress(),
    _keys._VERIFICATION_KEY: lambda ledger, _: ledger.verification(),
    _keys._FINGERPRINT_KEY: lambda ledger, _: ledger.fingerprint(),
    _keys._COLD_STARTS_KEY: lambda ledger, _: ledger.cold_verdict(),
    _keys._MLFLOW_PARENT_RUN_KEY: lambda ledger, _: ledger.mlflow_parent_run_id(),
    _keys._STUDY_UID_KEY: lambda ledger, _: ledger.study_uid(),
    _keys._RECHECKS_KEY: lambda ledger, _: ledger.rechecks(),
}

#: Trial attributes: how the ledger reads each (several also through the workers' bookkeeping).
TRIAL_READERS: dict[str, Read] = {
    _keys._CONFIG_KEY: Ledger.config,
    _keys._CONFIG_ID_KEY: Ledger.config_key,
    _keys._LABEL_KEY: Ledger.label,
    _keys._RESTARTS_KEY: Ledger.restarts,
    _keys._SUMMARY_KEY: Ledger.summary,
    _keys._FAILURE_KEY: Ledger.failure,
    _keys._PRUNED_REASON_KEY: Ledger.pruned_reason,
    _keys._INTERRUPTED_KEY: lambda ledger, trial: ledger.interrupted(trial),
    _keys._INFEASIBLE_KEY: Ledger.infeasible,
    _keys._DUPLICATE_OF_KEY: Ledger.duplicate_of,
    _keys._OWNER_KEY: Ledger.owner,
    _keys._PLANNED_STARTS_KEY: Ledger.planned_starts,
    _keys._LATENCY_KEY: Ledger.latency,
    _keys._SLO_CHECKS_KEY: Ledger.slo_checks,
}

#: Written for other tools reading the store (MLflow, a user's SQL), never read back by autotune: a wrong type there
#: cannot mislead it. The test below checks that the ledger indeed only writes them.
WRITE_ONLY = {_keys._RESOLVED_DIFFERS_KEY: "record_summary", _keys._DIFFERENCES_KEY: "record_summary"}

#: Claim attributes (on the companion claims study's trials), read when the verification's rounds are gathered.
CLAIM_KEYS = {_keys.CLAIM_JOB_KEY, _keys.CLAIM_RESTARTS_KEY, _keys.CLAIM_OWNER_KEY}

#: Values of the wrong type for every key: no key holds a bare fraction, nor a list mixing a number and a text.
WRONG = [7.5, [1, "two"]]


def _ledger() -> tuple[Ledger, optuna.trial.FrozenTrial]:
    study = optuna.create_study(study_name="s", storage=optuna.storages.InMemoryStorage(), direction="maximize")
    ledger = Ledger(study, create=True)
    study.ask()
    return ledger, study.trials[0]


def test_every_key_constant_has_a_reader_in_this_test() -> None:
    covered = set(STUDY_READERS) | set(TRIAL_READERS) | set(WRITE_ONLY) | CLAIM_KEYS
    assert set(ALL_KEYS) == covered, f"add a reader for: {sorted(set(ALL_KEYS) - covered)}"


def _one_line_naming(exc: LedgerError, key: str, where: str) -> None:
    line = str(exc)
    assert "\n" not in line and key in line and where in line, line


@pytest.mark.parametrize("value", WRONG, ids=["fraction", "list"])
@pytest.mark.parametrize("key", sorted(STUDY_READERS))
def test_a_wrong_typed_study_attribute_is_one_line_naming_it(key: str, value: Any) -> None:
    ledger, trial = _ledger()
    ledger.study.set_user_attr(key, value)
    with pytest.raises(LedgerError) as caught:
        STUDY_READERS[key](ledger, trial)
    _one_line_naming(caught.value, key, "the study")


@pytest.mark.parametrize("value", WRONG, ids=["fraction", "list"])
@pytest.mark.parametrize("key", sorted(TRIAL_READERS))
def test_a_wrong_typed_trial_attribute_is_one_line_naming_it_and_the_trial(key: str, value: Any) -> None:
    ledger, _ = _ledger()
    ledger.study.set_user_attr(_keys._STUDY_UID_KEY, "u")  # the study has autotune data: its schema is fixed
    trial = optuna.Trial(ledger.study, ledger.study.trials[0]._trial_id)
    trial.set_user_attr(key, value)
    with pytest.raises(LedgerError) as caught:
        TRIAL_READERS[key](ledger, ledger.study.trials[0])
    _one_line_naming(caught.value, key, "trial 0")


@pytest.mark.parametrize("value", WRONG, ids=["fraction", "list"])
@pytest.mark.parametrize("key", sorted(CLAIM_KEYS - {_keys.CLAIM_OWNER_KEY}))
def test_a_wrong_typed_claim_attribute_is_one_line_naming_it_and_the_claim(key: str, value: Any) -> None:
    ledger, _ = _ledger()
    claims = optuna.create_study(study_name="s" + CLAIMS_SUFFIX, storage=ledger.study._storage)
    claim = claims.ask()
    claim.set_user_attr(_keys.CLAIM_JOB_KEY, Ledger.verify_round_job(0))
    claim.set_user_attr(key, value)
    with pytest.raises(LedgerError) as caught:
        ledger.verify_rounds()
    _one_line_naming(caught.value, key, "trial 0")
    assert CLAIMS_SUFFIX in str(caught.value)


def test_a_claim_owner_of_the_wrong_type_is_an_unknown_owner() -> None:
    # The claim's owner is read only to say who holds it (liveness): a damaged one reads as unknown, never as alive.
    from autotune.store.ledger import claim_holder_gone, claim_owner

    ledger, _ = _ledger()
    claims = optuna.create_study(study_name="s" + CLAIMS_SUFFIX, storage=ledger.study._storage)
    claims.ask().set_user_attr(_keys.CLAIM_OWNER_KEY, [1, "two"])
    assert claim_owner(claims.trials[0]) is None and claim_holder_gone(claims.trials[0]) is False


def test_the_write_only_keys_are_only_written() -> None:
    from autotune.store import ledger as ledger_module

    names = {v: k for k, v in vars(_keys).items() if k.endswith("_KEY")}
    tree = ast.parse(inspect.getsource(ledger_module))
    for key, writer in WRITE_ONLY.items():
        users = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 and any(isinstance(n, ast.Name) and n.id == names[key] for n in ast.walk(f))}
        assert users == {writer}, (key, users)


def test_the_budget_reads_a_trials_restarts_through_their_parser() -> None:
    # starts_in_flight took len() of whatever was stored: a text counted its letters as engine starts.
    ledger, _ = _ledger()
    trial = optuna.Trial(ledger.study, ledger.study.trials[0]._trial_id)
    ledger.record_planned_starts(trial, 5)
    trial.set_user_attr(_keys._RESTARTS_KEY, "lots")
    with pytest.raises(LedgerError) as caught:
        ledger.starts_in_flight(unplanned=1)
    _one_line_naming(caught.value, _keys._RESTARTS_KEY, "trial 0")
