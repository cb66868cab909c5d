"""How a study runs: :class:`StudyOptions`, and the seed scheme that matches restarts across trials."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from autotune.store.ledger import DEFAULT_HEARTBEAT_S, DEFAULT_STORAGE, DEFAULT_STORE_DIR
from autotune.decisions.racing import RacingPolicy

__all__ = ["MAX_TOP_K", "STARTS_PER_VERIFIED", "VERIFY_SEED_OFFSET", "SEED_STRIDE", "StudyOptions"]

#: Seeds of one study seed lie in ``[seed * SEED_STRIDE, (seed + 1) * SEED_STRIDE)``.
SEED_STRIDE = 100_000
#: Verification rounds use fresh seeds the search never saw: search restart j has offset j, far below this.
VERIFY_SEED_OFFSET = 50_000
#: Without ``top_k``: verify one configuration per this many budgeted engine starts, 1 to :data:`MAX_TOP_K`.
STARTS_PER_VERIFIED = 30
#: Configurations verified by default (and the most a restart budget scales to).
MAX_TOP_K = 3


@dataclasses.dataclass(frozen=True)
class StudyOptions:
    """How a study runs.

    Attributes:
        study_name: Optuna study name (also the MLflow parent run's name).
        storage: Optuna storage URL (SQLite by default, also for several workers on one machine; PostgreSQL for
            several machines; ``memory`` keeps nothing, for benchmarks), or a storage object workers share.
        workdir: Per-study working files (engine caches, logs) go under ``workdir/<study_name>``.
        trials: Search trials to finish (resuming counts those already finished).
        policy: Restarts per trial and racing.
        top_k: Configurations verified against the baseline at the end; ``None`` (default) scales it to
            ``budget_restarts`` (see :attr:`verify_top_k`).
        verify_restarts: Counted restarts per verified configuration.
        verify_max_restarts: Cap on counted restarts for challengers still tied with the leading one (extra
            verification rounds, the baseline alongside); ``verify_restarts`` turns extra rounds off.
        budget_restarts: Engine starts for the whole study (search + verification), or ``None``.
        budget_minutes: Engine wall minutes for the whole study, or ``None``.
        sampler: ``tpe`` (default) or ``gp``.
        seed: Sampler seed and restart-seed base.
        confidence: Interval coverage.
        interval_method: ``t`` or ``bca``.
        fresh: Delete an existing study of the same name first.
        verify: Run the verification phase.
        command: The command line that started the study (recorded for provenance).
        enqueue: Parameter sets to try right after the baselines (new studies only).
        heartbeat_s: Seconds between a worker's heartbeats in the storage; a worker silent for four times this
            is taken for dead and its trial retried by another.
    """

    study_name: str
    storage: Any = DEFAULT_STORAGE
    workdir: str = os.path.join(DEFAULT_STORE_DIR, "autotune")
    trials: int = 20
    policy: RacingPolicy = RacingPolicy()
    top_k: int | None = None
    verify_restarts: int = 3
    verify_max_restarts: int = 5
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    confidence: float = 0.95
    interval_method: str = "t"
    fresh: bool = False
    verify: bool = True
    command: tuple[str, ...] = ()
    enqueue: tuple[Mapping[str, Any], ...] = ()
    heartbeat_s: int = DEFAULT_HEARTBEAT_S

    def search_seed(self, restart: int) -> int:
        """Search restart ``restart`` of every trial: trials are compared on matched restarts."""
        return self.seed * SEED_STRIDE + restart

    def verify_seed(self, rnd: int) -> int:
        return self.seed * SEED_STRIDE + VERIFY_SEED_OFFSET + rnd

    @property
    def cache_dir(self) -> str:
        """The study's engine caches and logs."""
        return os.path.join(self.workdir, self.study_name)

    @property
    def verify_top_k(self) -> int:
        """Configurations to verify: ``top_k`` if set, else one per 30 budgeted starts (1 to 3; 3 with no budget).

        Verifying three configurations and the baseline in three rounds costs 12 starts: 40% of a 30-start
        budget, every one of them a search trial not run. The benchmark (docs/benchmarks.md) measured the split.
        A minutes budget buys a number of starts known only once a start is priced: see :meth:`top_k_for`.
        """
        return self.top_k_for(self.budget_restarts)

    def top_k_for(self, starts: float | None) -> int:
        """``top_k`` if set, else one configuration per 30 engine starts the budget buys (1 to 3; 3 with no budget).

        ``starts`` is the restart budget, or what a minutes budget buys at the study's measured warm-start price
        (``study._verify_top_k``): a minutes budget is no license to spend 40% of 30 starts on verification.
        """
        if self.top_k is not None:
            return self.top_k
        if starts is None:
            return MAX_TOP_K
        return max(1, min(MAX_TOP_K, int(starts) // STARTS_PER_VERIFIED))

    @property
    def verify_reserve(self) -> int:
        """Engine starts held back from the search for verification (top-k plus the baseline).

        Extra rounds for near-ties get no reserve of their own: they run on what the search left, including the
        share of a slot that plan sharing freed. Starts held back for them would come out of the search, which
        is where a budget of tens of starts is short (docs/benchmarks.md).
        """
        return (self.verify_top_k + 1) * self.verify_restarts if self.verify else 0
