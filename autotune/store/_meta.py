"""What a study records once about itself: :class:`StudyMeta`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from autotune.records import reader
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


@reader(StudyMeta)
def _read_meta(data: dict[str, Any]) -> dict[str, Any]:
    # A study without a baseline stored it as null or as an empty object.
    return {**data, "baseline": data.get("baseline") or None}
