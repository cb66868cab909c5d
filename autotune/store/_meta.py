"""What a study records once about itself: :class:`StudyMeta`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.records import decode, encode
from autotune.core.records import EngineConfig, EngineFacts


@dataclasses.dataclass(frozen=True)
class StudyMeta:
    """What a study records once about itself: space, engine, model, workload, search settings, command.

    The search settings (``sampler``, ``racing``, ``top_k``, ``verify_restarts``, ``verify_max_restarts``,
    ``verify_sequential_rounds``, ``verify_margin``, ``verify_planned``, ``min_effect``, ``power``, the budgets, ``trials``, ``seed``, ``command``, ``confidence``, ``interval_method``, ``verify``, ``enqueue``) are
    :meth:`autotune.study.StudyOptions.stored_settings`, kept flat because every stored study has them so;
    :meth:`~autotune.study.StudyOptions.from_meta` reads them back. ``None`` is a setting the autotune that wrote
    the study did not store: the reader takes the default, which has one home, :class:`~autotune.study.StudyOptions`.
    """

    space_name: str | None = None
    space_file: str | None = None
    engine: EngineFacts = dataclasses.field(default_factory=EngineFacts)
    model: str | None = None
    workload: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sampler: str | None = None
    sampler_why: str | None = None
    racing: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    top_k: int | None = None
    verify_restarts: int | None = None
    verify_max_restarts: int | None = None
    verify_sequential_rounds: int | None = None
    verify_margin: float | None = None
    verify_planned: bool | None = None
    min_effect: float | None = None
    power: float | None = None
    budget_restarts: int | None = None
    budget_minutes: float | None = None
    trials: int | None = None
    seed: int | None = None
    command: tuple[str, ...] = ()
    baseline: EngineConfig | None = None
    #: What ``autotune worker`` needs to join the study from another machine without the space file.
    engine_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    confidence: float | None = None
    interval_method: str | None = None
    verify: bool | None = None
    enqueue: tuple[Mapping[str, Any], ...] = ()
    objective: str = "throughput"
    slo: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: What ``tune --warm-start`` carried in and from where (``study._warm_start``); empty for a cold study.
    warm_start: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["engine"] = encode(self.engine)
        out["workload"] = dict(self.workload)
        out["racing"] = dict(self.racing)
        out["command"] = list(self.command)
        out["baseline"] = None if self.baseline is None else encode(self.baseline)
        out["engine_options"] = dict(self.engine_options)
        out["enqueue"] = [dict(p) for p in self.enqueue]
        out["slo"] = dict(self.slo)
        out["warm_start"] = dict(self.warm_start)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> StudyMeta:
        data = dict(data or {})
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["engine"] = decode(EngineFacts, data.get("engine"))
        kw["workload"] = dict(data.get("workload") or {})
        kw["racing"] = dict(data.get("racing") or {})
        kw["command"] = tuple(data.get("command") or ())
        kw["baseline"] = None if not data.get("baseline") else decode(EngineConfig, data["baseline"])
        kw["engine_options"] = dict(data.get("engine_options") or {})
        kw["enqueue"] = tuple(dict(p) for p in data.get("enqueue") or ())
        kw["slo"] = {str(k): float(v) for k, v in dict(data.get("slo") or {}).items()}
        kw["warm_start"] = dict(data.get("warm_start") or {})
        return cls(**kw)
