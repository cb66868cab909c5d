"""The ledger: namespaced keys, a schema version, and studies written before the version existed."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.store import ledger as ledger_mod
from autotune.store.ledger import SCHEMA_VERSION, Ledger, LedgerError
from autotune.decisions.racing import RacingPolicy
from autotune.report._build import build_report
from autotune.report._report import render_report
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

TRUTH = {("FULL_AND_PIECEWISE", 2): 300.0, ("default", 0): 200.0}
#: The bare keys autotune wrote before the ledger existed (schema 0): what a study from then holds.
LEGACY_TRIAL_KEYS = {"config", "config_key", "label", "restarts", "summary", "resolved_differs"}
LEGACY_STUDY_KEYS = {"meta", "space_yaml", "baselines_enqueued", "verify_candidates", "verification"}


def _options(tmp_path: Path, **kw) -> StudyOptions:
    base = dict(study_name="l", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                trials=5, policy=RacingPolicy(min_restarts=2, racing=False), top_k=1, verify_restarts=2)
    base.update(kw)
    return StudyOptions(**base)


def _stored_keys(study: optuna.Study) -> tuple[set[str], set[str]]:
    trial_keys = {k for t in study.trials for k in t.user_attrs}
    return set(study.user_attrs), trial_keys


def test_a_new_study_is_stamped_with_the_schema_and_every_key_is_namespaced(tmp_path):
    ledger = run_study(parse_space(SMALL_SPACE), FakeEngine(by_params(TRUTH)), _options(tmp_path))
    assert ledger.version == SCHEMA_VERSION
    study_keys, trial_keys = _stored_keys(ledger.study)
    assert all(k.startswith("autotune:") for k in study_keys | trial_keys)
    assert LEGACY_STUDY_KEYS <= {k.removeprefix("autotune:") for k in study_keys}
    assert LEGACY_TRIAL_KEYS <= {k.removeprefix("autotune:") for k in trial_keys}
    # Verification restarts live on the rounds' claims, in the study's companion claims study, namespaced too.
    claims = optuna.load_study(study_name="l" + ledger_mod.CLAIMS_SUFFIX, storage=ledger.study._storage)
    assert all(k.startswith("autotune:") for t in claims.trials for k in t.user_attrs)
    stored = sum(len(v) for by_key in ledger.verify_rounds().values() for v in by_key.values())
    assert stored == sum(len(e.restarts) for e in ledger.verification().entries) >= 4
    assert ledger_mod.study_names(ledger.study._storage) == ["l"]


def test_a_study_written_before_the_schema_opens_resumes_and_keeps_its_bare_keys(tmp_path):
    opts = _options(tmp_path)
    # A study as the code before the ledger left it: bare keys, no version.
    old = optuna.create_study(study_name="l", storage=opts.storage, direction="maximize")
    old.set_user_attr("baselines_enqueued", False)
    ledger = run_study(parse_space(SMALL_SPACE), FakeEngine(by_params(TRUTH)), opts)
    assert ledger.version == 0
    study_keys, trial_keys = _stored_keys(ledger.study)
    assert not any(k.startswith("autotune:") for k in study_keys | trial_keys), "one study, one schema"
    assert LEGACY_STUDY_KEYS <= study_keys and LEGACY_TRIAL_KEYS <= trial_keys
    reopened = ledger_mod.load("l", opts.storage)
    assert reopened.version == 0 and reopened.verification() is not None
    assert [r.number for r in reopened.trial_records()] == [r.number for r in ledger.trial_records()]
    assert "Verdict:" in render_report(build_report(reopened))


def test_a_study_from_a_newer_autotune_is_refused_in_one_line(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="future", storage=storage)
    study.set_user_attr("autotune:schema_version", SCHEMA_VERSION + 1)
    with pytest.raises(LedgerError) as err:
        ledger_mod.load("future", storage)
    message = str(err.value)
    assert "\n" not in message and f"version {SCHEMA_VERSION + 1}" in message and "upgrade autotune" in message


def test_unknown_study_names_the_studies_there_are(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name="present", storage=storage)
    with pytest.raises(LedgerError, match="no study named 'absent'.*present"):
        ledger_mod.load("absent", storage)
    assert ledger_mod.latest_study_name(storage) == "present"


def test_load_takes_the_storage_url_as_the_command_line_parsed_it(tmp_path):
    """``tune --warm-start``, a resume and ``worker`` hand ``load`` the :class:`StorageUrl` they parsed once: it opens
    the same study as the text, and a missing study is the same line, naming the URL as typed."""
    from autotune.core.urls import StorageUrl

    text = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name="present", storage=text)
    parsed = StorageUrl.parse(text)
    assert ledger_mod.load("present", parsed).name == ledger_mod.load("present", text).name == "present"
    lines = []
    for storage in (text, parsed):
        with pytest.raises(LedgerError) as err:
            ledger_mod.load("absent", storage)
        lines.append(str(err.value))
    assert lines[0] == lines[1] and text in lines[0]


def test_a_fresh_empty_study_reads_as_nothing_recorded():
    ledger = Ledger(optuna.create_study(), create=True)
    assert ledger.version == SCHEMA_VERSION
    assert ledger.trial_records() == [] and ledger.verification() is None and ledger.budget_used() == (0, 0.0)
    assert ledger.meta().space_name is None


def test_requeue_on_a_storage_without_heartbeats_queues_nothing_and_does_not_raise():
    # A storage without heartbeats (memory) has no stale-trial callback to queue a retry with: the failed trial is
    # left as it is (it raised AttributeError before mypy's check).
    from optuna.trial import TrialState

    from autotune.store.orphans import requeue

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    study.tell(trial, state=TrialState.FAIL)
    assert requeue(Ledger(study), study.trials[0]) is False
    assert [t.state for t in study.trials] == [TrialState.FAIL]
