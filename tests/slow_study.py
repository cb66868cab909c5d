"""Run a study whose restarts take real time, for the kill -9 resume test: ``python -m tests.slow_study URL``."""

from __future__ import annotations

import sys

from autotune.decisions.racing import RacingPolicy
from autotune.config.space import parse_space
from autotune.study import StudyOptions, run_study
from tests.conftest import SMALL_SPACE, FakeEngine, by_params

TRUTH = {("FULL_AND_PIECEWISE", 2): 300.0, ("FULL_AND_PIECEWISE", 1): 250.0, ("NONE", 0): 40.0}


def options(storage: str, workdir: str, trials: int = 6) -> StudyOptions:
    return StudyOptions(study_name="resume", storage=storage, workdir=workdir, trials=trials,
                        policy=RacingPolicy(min_restarts=3, racing=False), top_k=2, verify_restarts=2, seed=3)


if __name__ == "__main__":
    storage, workdir, sleep_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    engine = FakeEngine(by_params(TRUTH), sleep_s=sleep_s)
    run_study(parse_space(SMALL_SPACE), engine, options(storage, workdir))
