"""What earlier studies on this store measured on the same machine: the restart noise a new plan starts from.

A study's own restarts say little about noise before it has run many (issue 41: two restarts 0.4% apart planned a
verification on "CV 0%" where the machine varied 10-13%). Studies already in the store that ran on the same GPU
and engine measured that machine for longer: their counted restarts, one group per (study, configuration), are the
machine's prior (:class:`autotune.decisions.noise.NoisePrior`).

Only verification restarts are read: they span the whole phase (minutes, several rounds), so their spread holds
what a verification will meet, where a search's few back-to-back restarts of one configuration do not. A study that
cannot be read (another tool's, a newer schema, a broken record) is skipped: another program's data never stops a
plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.store._storage import make_storage, study_names
from autotune.store.ledger import Ledger

__all__ = ["MACHINE_KEYS", "MachineRecord", "recorded_noise"]

#: The engine facts that name the machine a restart's noise belongs to.
MACHINE_KEYS = ("engine", "gpu", "profile")
#: The most earlier studies read (the newest first): a long-lived store stays quick to plan from.
MOST_STUDIES = 20


def _machine(engine: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(engine.get(k) for k in MACHINE_KEYS)


@dataclasses.dataclass(frozen=True)
class MachineRecord:
    """What earlier studies measured on one machine.

    Attributes:
        groups: Counted verification throughputs, one group per (study, configuration).
        studies: Studies that gave any.
        warm_minutes: Engine wall minutes of their counted verification restarts (what a warm restart costs there).
    """

    groups: tuple[tuple[float, ...], ...] = ()
    studies: int = 0
    warm_minutes: tuple[float, ...] = ()


def recorded_noise(storage: str | optuna.storages.BaseStorage, this_study: str,
                   engine: Mapping[str, Any]) -> MachineRecord:
    """Counted verification restarts of earlier studies on the machine ``engine`` names (a fingerprint's ``engine``
    facts, :data:`MACHINE_KEYS`); empty for a store without such studies, or when the machine is unknown."""
    machine = _machine(engine)
    if not any(v is not None for v in machine):
        return MachineRecord()
    groups: list[tuple[float, ...]] = []
    minutes: list[float] = []
    studies = 0
    with contextlib.suppress(Exception):
        if isinstance(storage, str):
            storage = make_storage(storage, heartbeat_s=None)
        names = [n for n in study_names(storage) if n != this_study][-MOST_STUDIES:]
        for name in reversed(names):
            with contextlib.suppress(Exception):
                ledger = Ledger(optuna.load_study(study_name=name, storage=storage))
                stored = ledger.fingerprint()
                verification = ledger.verification()
                if stored is None or verification is None or _machine(stored.engine) != machine:
                    continue
                found = [tuple(e.summary.values) for e in verification.entries if len(e.summary.values) >= 2]
                if found:
                    groups.extend(found)
                    studies += 1
                    minutes += [r.wall_s / 60.0 for e in verification.entries for r in e.restarts
                                if r.ok and not r.cold and r.wall_s]
    return MachineRecord(tuple(groups), studies, tuple(minutes))
