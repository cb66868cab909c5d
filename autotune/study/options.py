"""How a study runs: :class:`StudyOptions`, and the seed scheme that matches restarts across trials.

The settings have one home: the command line builds them once (``autotune.cli``'s ``TuneSettings``), the study
stores them in its metadata (:meth:`StudyOptions.stored_settings`, the flat fields of
:class:`~autotune.store.ledger.StudyMeta`), and a worker that joins reads them back (:meth:`StudyOptions.from_meta`).
Defaults live on the dataclass fields below and nowhere else.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.core.params import TrialParams
from autotune.decisions.racing import RacingPolicy
from autotune.store.ledger import DEFAULT_HEARTBEAT_S, DEFAULT_STORAGE, DEFAULT_WORKDIR, StudyMeta

if TYPE_CHECKING:
    import optuna

__all__ = ["DEFAULT_TOP_K", "NO_RACING_RESTARTS", "STARTS_PER_VERIFIED", "VERIFY_SEED_OFFSET", "SEED_STRIDE",
           "StudyOptions"]

#: Seeds of one study seed lie in ``[seed * SEED_STRIDE, (seed + 1) * SEED_STRIDE)``.
SEED_STRIDE = 100_000
#: Verification rounds use fresh seeds the search never saw: search restart j has offset j, far below this.
VERIFY_SEED_OFFSET = 50_000
#: Without ``top_k``: verify one configuration per this many budgeted engine starts, 1 to :data:`DEFAULT_TOP_K`.
STARTS_PER_VERIFIED = 30
#: Configurations verified when ``top_k`` is not given: with no budget, and the most a budget scales to (a user's
#: ``--top-k`` may ask for more, up to the flag's own limit, ``cli.preflight.MAX_TOP_K_FLAG``).
DEFAULT_TOP_K = 3
#: Restarts per trial without racing, when ``--restarts`` does not say.
NO_RACING_RESTARTS = 3


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
        verify_restarts: Counted restarts per verified configuration in the fixed design (``verify_planned``
            off), and the fewest a plan gives a side.
        verify_planned: Plan verification's restarts from the noise the search measured
            (:mod:`autotune.decisions.planning`): each side gets what resolving ``min_effect`` at ``power`` needs,
            within the budget's share. Off: ``verify_restarts`` each (the default here, for studies from before the
            plan and for callers that set counts; ``autotune tune`` plans unless ``--verify-restarts N`` is given).
        min_effect: The smallest speedup worth detecting (1.05: 5%).
        power: The chance a plan aims to give a real ``min_effect`` of being found.
        verify_max_restarts: Cap on counted restarts for challengers still tied with the leading one (extra
            verification rounds, the baseline alongside); ``verify_restarts`` turns extra rounds off.
        verify_sequential_rounds: Most rounds of the winner and the baseline after those, while the winner's
            speedup interval straddles 1 and the budget pays for them, under a group-sequential design
            (:mod:`autotune.decisions.sequential`); 0 keeps the fixed design.
        verify_margin: Equivalence margin that also ends those rounds: the interval inside ``[1/(1+m), 1+m]``.
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
        warm_start: What ``--warm-start`` carried in and from where (``study._warm_start``); its configurations are
            in ``enqueue``.
    """

    study_name: str
    # The URL as text, not a StorageUrl: Optuna, the store and a worker's command line take it as given, and a
    # storage object (several in-process workers sharing one InMemoryStorage, bench/scaling.py) has no URL.
    storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE
    workdir: str = DEFAULT_WORKDIR
    trials: int = 20
    policy: RacingPolicy = RacingPolicy()
    top_k: int | None = None
    verify_restarts: int = 3
    verify_planned: bool = False
    min_effect: float = 1.05
    power: float = 0.8
    verify_max_restarts: int = 5
    verify_sequential_rounds: int = 5
    verify_margin: float = 0.03
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    confidence: float = 0.95
    interval_method: str = "t"
    fresh: bool = False
    verify: bool = True
    command: tuple[str, ...] = ()
    enqueue: tuple[TrialParams, ...] = ()
    heartbeat_s: int = DEFAULT_HEARTBEAT_S
    warm_start: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def stored_settings(self) -> dict[str, Any]:
        """The settings a study stores in its metadata (the :class:`StudyMeta` fields of the same names), so a
        worker on any machine runs the study as it was started (:meth:`from_meta`).

        What belongs to one process is not stored: the storage URL and working directory (each machine has its
        own), ``fresh`` (an action, not a setting) and the heartbeat (each worker's own).
        """
        return {
            "sampler": self.sampler, "racing": dataclasses.asdict(self.policy),
            # Under a minutes budget alone top-k follows the measured price of a start: a worker that joins must
            # derive it the same way, not inherit the number this one would have used before any start.
            "top_k": self.top_k if self.top_k_follows_minutes else self.verify_top_k,
            "verify_restarts": self.verify_restarts, "verify_max_restarts": self.verify_max_restarts,
            "verify_sequential_rounds": self.verify_sequential_rounds, "verify_margin": self.verify_margin,
            "verify_planned": self.verify_planned, "min_effect": self.min_effect, "power": self.power,
            "budget_restarts": self.budget_restarts, "budget_minutes": self.budget_minutes, "trials": self.trials,
            "seed": self.seed, "command": tuple(self.command), "confidence": self.confidence,
            "interval_method": self.interval_method, "verify": self.verify,
            "enqueue": tuple(dict(p) for p in self.enqueue), "warm_start": dict(self.warm_start),
        }

    @classmethod
    def from_meta(cls, meta: StudyMeta, *, study_name: str,
                  storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE, workdir: str = DEFAULT_WORKDIR,
                  heartbeat_s: int = DEFAULT_HEARTBEAT_S, command: Sequence[str] = ()) -> StudyOptions:
        """The options a study was started with, read back from its metadata (:meth:`stored_settings`), for a
        worker that joins it; this process's own storage URL, workdir, heartbeat and command line are given.

        A setting an older autotune did not store takes the field's default; a study without
        ``verify_max_restarts`` ran no extra verification rounds, so it keeps ``verify_restarts`` as its cap.
        """
        default = cls(study_name=study_name)

        def stored(name: str) -> Any:
            value = getattr(meta, name)
            return getattr(default, name) if value is None else value

        verify_restarts = stored("verify_restarts")
        return cls(
            study_name=study_name, storage=storage, workdir=workdir, trials=stored("trials"),
            policy=RacingPolicy(**meta.racing) if meta.racing else default.policy, top_k=meta.top_k,
            verify_restarts=verify_restarts,
            verify_max_restarts=(verify_restarts if meta.verify_max_restarts is None else meta.verify_max_restarts),
            verify_sequential_rounds=stored("verify_sequential_rounds"), verify_margin=stored("verify_margin"),
            # A study from before the plan ran the fixed design: it resumes as it began.
            verify_planned=bool(meta.verify_planned), min_effect=stored("min_effect"), power=stored("power"),
            budget_restarts=meta.budget_restarts, budget_minutes=meta.budget_minutes, sampler=stored("sampler"),
            seed=stored("seed"), confidence=stored("confidence"), interval_method=stored("interval_method"),
            verify=stored("verify"), enqueue=tuple(dict(p) for p in meta.enqueue), heartbeat_s=heartbeat_s,
            command=tuple(command), warm_start=dict(meta.warm_start),
        )

    @property
    def top_k_follows_minutes(self) -> bool:
        """Verification's top-k is left to a minutes budget alone (no ``top_k``, no restart budget)."""
        return self.top_k is None and self.budget_restarts is None and self.budget_minutes is not None

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
            return DEFAULT_TOP_K
        return max(1, min(DEFAULT_TOP_K, int(starts) // STARTS_PER_VERIFIED))

    @property
    def verify_reserve(self) -> int:
        """Engine starts held back from the search for verification (top-k plus the baseline).

        Extra rounds for near-ties get no reserve of their own: they run on what the search left, including the
        share of a slot that plan sharing freed. Starts held back for them would come out of the search, which
        is where a budget of tens of starts is short (docs/benchmarks.md).
        """
        return (self.verify_top_k + 1) * self.verify_restarts if self.verify else 0

