"""Observers get the study's events as typed calls, each with its own arguments, in the study's order."""

from __future__ import annotations

from pathlib import Path

from autotune.config.space import parse_space
from autotune.decisions.racing import RacingPolicy
from autotune.study import StudyOptions, run_study
from autotune.study.events import StudyContext, StudyObserver, notify
from autotune.core.records import EngineConfig, RestartResult
from autotune.store.ledger import TrialRecord
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

TRUTH = {("FULL_AND_PIECEWISE", 2): 300.0, ("FULL_AND_PIECEWISE", 1): 250.0, ("PIECEWISE", 2): 220.0,
         ("NONE", 0): 40.0, ("default", 0): 200.0}


class Recorder(StudyObserver):
    """Writes down every event it gets, with the arguments that tell them apart."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def on_study_start(self, ctx: StudyContext) -> None:
        self.events.append(("study_start",))

    def on_trial_start(self, ctx: StudyContext, number: int, config: EngineConfig) -> None:
        self.events.append(("trial_start", number))

    def on_restart(self, ctx: StudyContext, phase: str, label: str, result: RestartResult) -> None:
        self.events.append(("restart", phase, label))

    def on_trial_end(self, ctx: StudyContext, record: TrialRecord) -> None:
        self.events.append(("trial_end", record.number))

    def on_search_end(self, ctx: StudyContext, end: object, trials_started: int) -> None:
        self.events.append(("search_end", trials_started))

    def on_verification_end(self, ctx: StudyContext, verification: object) -> None:
        self.events.append(("verification_end",))

    def on_study_end(self, ctx: StudyContext) -> None:
        self.events.append(("study_end",))


def test_notify_hands_the_event_to_every_observer_in_order():
    calls: list[tuple[str, int]] = []

    class Seen(StudyObserver):
        def __init__(self, name: str) -> None:
            self.name = name

        def on_search_end(self, ctx: StudyContext, end: object, trials_started: int) -> None:
            calls.append((self.name, trials_started))

    notify([Seen("a"), Seen("b")], lambda o: o.on_search_end(None, None, 7))
    assert calls == [("a", 7), ("b", 7)]


def test_a_study_sends_each_event_with_its_arguments_in_order(tmp_path: Path):
    options = StudyOptions(study_name="t", storage=f"sqlite:///{tmp_path}/optuna.db", workdir=str(tmp_path / "work"),
                           trials=4, policy=RacingPolicy(min_restarts=2, racing=False), top_k=2, verify_restarts=2,
                           seed=1)
    first, second = Recorder(), Recorder()
    run_study(parse_space(SMALL_SPACE), FakeEngine(by_params(TRUTH)), options, [first, second])
    events = first.events
    assert events == second.events
    assert events[0] == ("study_start",) and events[-1] == ("study_end",)
    names = [e[0] for e in events]
    assert names.index("search_end") < names.index("verification_end") < names.index("study_end")
    started = [e[1] for e in events if e[0] == "trial_start"]
    assert started and started == [e[1] for e in events if e[0] == "trial_end"]
    assert ("search_end", len(started)) in events
    # Each search restart names its trial; verification's name their configuration.
    search = {e[2] for e in events if e[0] == "restart" and e[1] == "search"}
    assert search == {f"trial {n}" for n in started}
    assert any(e[0] == "restart" and e[1] == "verify" and e[2].startswith("verify ") for e in events)
