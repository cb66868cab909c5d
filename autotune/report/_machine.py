"""What the machine did around each restart, as the report names it: memory guard trips, settle waits, restarts
whose machine state departed from the study's, and the KV audits of each configuration.

Read from the restarts' stored facts (:mod:`autotune.core.facts`), never from the engine: a study reported on
another machine says the same. ``autotune audit`` runs the same KV audit (:func:`kv_findings`) on its one restart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from autotune.core import facts
from autotune.core.failure import FailureKind, kind_of
from autotune.core.records import EngineConfig, RestartResult
from autotune.engines.vllm import KvFacts, kv_audit
from autotune.machine import MachineState, departures
from autotune.records import record

__all__ = ["MachineNotes", "RestartNote", "kv_findings", "machine_notes", "render_machine"]

#: Lines of each kind the text shows (``--json`` has them all).
_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class RestartNote:
    """One restart the report names: where it ran (``trial 3`` / ``verification``), its configuration, why."""

    where: str
    label: str
    restart: int
    what: str


@record(renamed={"kv": "kv_audit", "noise": "noise_sources"})
@dataclasses.dataclass(frozen=True)
class MachineNotes:
    """The study's memory and machine notes.

    Attributes:
        guard_trips: Restarts the memory guard killed, with the guard's figures.
        settle_waits: Restarts whose start waited for memory to come back (the wait in ``what``).
        settle_total_s: Seconds all restarts spent settling (the waits that found memory back at once included).
        departures: Restarts whose machine state departed from the study's median (:func:`machine.departures`).
        kv: Each configuration's KV audit findings (``restart`` is -1: they are about all its restarts).
    """

    guard_trips: tuple[RestartNote, ...] = ()
    settle_waits: tuple[RestartNote, ...] = ()
    settle_total_s: float = 0.0
    departures: tuple[RestartNote, ...] = ()
    kv: tuple[RestartNote, ...] = ()
    #: Configurations whose restarts vary more by design (vLLM's adaptive verification profiles at every start).
    noise: tuple[RestartNote, ...] = ()


def kv_findings(config: EngineConfig, restarts: Sequence[RestartResult], workload: Mapping[str, Any]) -> list[str]:
    """The KV audits (:func:`autotune.engines.vllm.kv_audit`) of one configuration's restarts, from their facts:
    drift across them, capacity below ``max_num_seqs`` x (input + output) of the workload, a negative graph-memory
    estimate. Nothing for restarts that recorded no KV facts (another engine, an older study)."""
    kv = [KvFacts.from_facts(r.facts) for r in restarts]
    kv = [k for k in kv if k != KvFacts()]
    if not kv:
        return []
    seqs = config.engine_args.get("max_num_seqs")
    if not isinstance(seqs, int) or isinstance(seqs, bool):
        seqs = 0  # vLLM's default depends on the model and the GPU: no bound to check it against
    return kv_audit(kv, seqs, int(workload.get("input_len") or 0), int(workload.get("output_len") or 0))


def machine_notes(runs: Iterable[tuple[str, EngineConfig, Sequence[RestartResult]]],
                  workload: Mapping[str, Any]) -> MachineNotes:
    """The notes from every run of the study: ``(where, config, restarts)`` per search trial and per verified
    configuration."""
    runs = list(runs)
    flat = [(where, config, r) for where, config, restarts in runs for r in restarts]
    trips = tuple(RestartNote(w, c.label(), r.restart, r.error or "") for w, c, r in flat
                  if kind_of(r) is FailureKind.GUARD)
    waits = tuple(RestartNote(w, c.label(), r.restart, f"waited {float(r.facts[facts.SETTLE_WAIT_S]):.1f} s for "
                              f"memory to come back before starting")
                  for w, c, r in flat if r.facts.get(facts.SETTLE_WAITED) is True)
    total = sum(float(v) for _, _, r in flat if isinstance(v := r.facts.get(facts.SETTLE_WAIT_S), int | float))
    states = [MachineState.from_facts(r.facts) for _, _, r in flat]
    departed = tuple(RestartNote(w, c.label(), r.restart, why)
                     for (w, c, r), why in zip(flat, departures(states)) if why is not None)
    by_key: dict[str, tuple[EngineConfig, list[RestartResult]]] = {}
    for _, config, restarts in runs:
        by_key.setdefault(config.key(), (config, []))[1].extend(restarts)
    kv = tuple(RestartNote("configuration", config.label(), -1, finding)
               for config, restarts in by_key.values() for finding in kv_findings(config, restarts, workload))
    noise = tuple(RestartNote("configuration", config.label(), -1, note)
                  for config, restarts in by_key.values() if (note := noise_source(config, restarts)) is not None)
    return MachineNotes(trips, waits, round(total, 3), departed, kv, noise)


def noise_source(config: EngineConfig, restarts: Sequence[RestartResult]) -> str | None:
    """Why ``config``'s restarts vary more than the machine makes them, by design (``None``: no known reason).

    vLLM's ``enable_adaptive_verification`` (0.28+) profiles the verify budget at every engine start, so each start
    may verify differently: a source of restart-to-restart noise the configuration carries with it.
    """
    if not (config.speculative_config or {}).get("enable_adaptive_verification"):
        return None
    values = [r.value for r in restarts if r.ok and r.value]
    spread = ""
    if len(values) >= 2:
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        spread = f"; its {len(values)} restarts varied by {sd / mean:.1%} (CV)"
    return ("adaptive verification profiles its verify budget at every start, so its restarts vary more than the "
            f"machine makes them (a noise source: compare it with more restarts){spread}")


def render_machine(notes: MachineNotes | None) -> list[str]:
    """The report's lines on memory and the machine; none when there is nothing to say."""
    if notes is None:
        return []
    lines: list[str] = []
    sections = [
        ("Memory guard trips", notes.guard_trips),
        ("Restarts that departed from the study's machine state (not comparable with the others)", notes.departures),
        ("KV audit", notes.kv),
        ("Noise sources", notes.noise),
    ]
    for title, items in sections:
        if items:
            lines += ["", f"{title} ({len(items)}):"]
            for n in items[:_SHOWN]:
                where = n.label if n.restart < 0 else f"{n.where} {n.label} restart {n.restart}"
                lines.append(f"  ! {where}: {n.what}")
            if len(items) > _SHOWN:
                lines.append(f"  ... and {len(items) - _SHOWN} more (--json for all)")
    if notes.settle_waits:
        lines += ["", f"Settle: {len(notes.settle_waits)} start(s) waited for memory to come back, "
                      f"{notes.settle_total_s:.1f} s in all:"]
        for n in notes.settle_waits[:_SHOWN]:
            lines.append(f"  ~ {n.where} {n.label} restart {n.restart}: {n.what}")
        if len(notes.settle_waits) > _SHOWN:
            lines.append(f"  ... and {len(notes.settle_waits) - _SHOWN} more (--json for all)")
    return lines
