"""``autotune tune``'s flags as one typed object, :class:`TuneSettings`: built once from the parsed command line, its
bounds checked once, then turned into the study's :class:`~autotune.study.StudyOptions`.

Each counting or fractional flag's bounds are its field's constraints; a value outside them is one line naming the
flag and the fix (:data:`_LINES`), raised as :class:`~autotune.cli.preflight.PreflightError`, before anything is
created. The argparse ``Namespace`` stops here: what goes down to the study is typed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autotune.cli.preflight import (
    MAX_BUDGET_MINUTES,
    MAX_BUDGET_RESTARTS,
    MAX_RESTARTS,
    MAX_SEED,
    MAX_TOP_K_FLAG,
    MAX_TRIALS,
    PreflightError,
)
from autotune.core.params import TrialParams
from autotune.core.urls import StorageUrl
from autotune.decisions.racing import RacingPolicy
from autotune.store.ledger import DEFAULT_HEARTBEAT_S, DEFAULT_STORAGE, DEFAULT_WORKDIR
from autotune.study.options import NO_RACING_RESTARTS, StudyOptions

__all__ = ["TuneSettings"]


class TuneSettings(BaseModel):
    """What ``autotune tune``'s flags ask for, each as typed and as bounded as the flag; ``None``: the flag was not
    given (a flag given as 0 is a value, refused by its bound, never "unset").

    With several bad flags, the line raised is for the one that ``tune`` has always checked first (:data:`_ORDER`).
    ``--heartbeat``'s bounds are :func:`autotune.cli.worker.check_worker_args`'s, one rule shared with ``worker``.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    top_k: int | None = Field(None, ge=1, le=MAX_TOP_K_FLAG)
    seed: int = Field(StudyOptions.seed, ge=0, le=MAX_SEED)
    budget_restarts: int | None = Field(None, ge=1, le=MAX_BUDGET_RESTARTS)
    budget_minutes: float | None = Field(None, gt=0, le=MAX_BUDGET_MINUTES)
    trials: int | None = Field(None, ge=1, le=MAX_TRIALS)
    max_restarts: int = Field(RacingPolicy.max_restarts, ge=1, le=MAX_RESTARTS)
    verify_restarts: int | None = Field(None, ge=1, le=MAX_RESTARTS)
    verify_rounds: int = Field(StudyOptions.verify_sequential_rounds, ge=0, le=MAX_RESTARTS)
    restarts: int | None = Field(None, ge=1, le=MAX_RESTARTS)
    min_effect: float | None = Field(None, gt=1.0, le=10.0)
    power: float | None = Field(None, ge=0.5, lt=1.0)
    verify_margin: float = Field(StudyOptions.verify_margin, gt=0.0, lt=1.0)
    no_racing: bool = False
    no_verify: bool = False
    fresh: bool = False
    sampler: str = StudyOptions.sampler
    ci_method: str = StudyOptions.interval_method
    storage: StorageUrl = Field(default_factory=lambda: StorageUrl.parse(DEFAULT_STORAGE))
    workdir: str = DEFAULT_WORKDIR
    heartbeat: int = DEFAULT_HEARTBEAT_S

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> TuneSettings:
        """The settings ``args`` (tune's parsed command line) asks for; a value out of its flag's bounds is one
        :class:`PreflightError` line naming the flag."""
        values = {name: getattr(args, name) for name in cls.model_fields}
        try:
            return cls(**values)
        except ValidationError as exc:
            first = exc.errors()[0]  # a model rule runs only once every field is within its bounds
            if first["type"] == "value_error":  # a rule between flags (_restarts_within_the_cap): its own line
                raise PreflightError(str(first["ctx"]["error"])) from None
            bad = [(str(e["loc"][0]), e["type"].startswith("greater_than")) for e in exc.errors()]
            if not all(name in _LINES for name, _below in bad):
                raise
            name, below = min(bad, key=_rank)
            raise PreflightError(_LINES[name](values[name], below)) from None

    @field_validator("storage", mode="before")
    @classmethod
    def _parse_storage(cls, value: object) -> object:
        """``--storage`` parsed here, once: every later check and opening reads the :class:`StorageUrl`'s fields."""
        return StorageUrl.parse(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _restarts_within_the_cap(self) -> TuneSettings:
        if not self.no_racing and self.starting_restarts > self.max_restarts:
            raise ValueError(f"--restarts must be between 1 and --max-restarts ({self.max_restarts}), "
                             f"got {self.starting_restarts}")
        return self

    @property
    def starting_restarts(self) -> int:
        """``--restarts``, else 3 without racing, else racing's own start."""
        if self.restarts is not None:
            return self.restarts
        return NO_RACING_RESTARTS if self.no_racing else RacingPolicy.min_restarts

    def study_options(self, *, study_name: str, enqueue: Sequence[TrialParams] = (),
                      command: Sequence[str] = ()) -> StudyOptions:
        """The study's options these settings make.

        What a flag leaves unset takes the default of the field, or the one the flags imply: ``--trials`` defaults
        to a restart budget when there is one (no trial costs less than one engine start, so the budget bounds the
        trials and a default count must not stop the study first); ``--restarts`` to 3 without racing.
        ``study_name`` (it may come from the space), ``enqueue`` (checked against the space) and ``command`` (the
        command line, redacted) are the caller's.
        """
        restarts = self.starting_restarts
        return StudyOptions(
            study_name=study_name, storage=self.storage.url, workdir=self.workdir,
            trials=self.trials if self.trials is not None else (self.budget_restarts or StudyOptions.trials),
            policy=RacingPolicy(min_restarts=restarts, max_restarts=max(restarts, self.max_restarts),
                                racing=not self.no_racing),
            top_k=self.top_k, verify_restarts=_given(self.verify_restarts, StudyOptions.verify_restarts),
            verify_planned=self.verify_restarts is None,
            min_effect=_given(self.min_effect, StudyOptions.min_effect), power=_given(self.power, StudyOptions.power),
            budget_restarts=self.budget_restarts, budget_minutes=self.budget_minutes,
            verify_sequential_rounds=self.verify_rounds, verify_margin=self.verify_margin,
            sampler=self.sampler, seed=self.seed, interval_method=self.ci_method, fresh=self.fresh,
            verify=not self.no_verify, command=tuple(command), enqueue=tuple(dict(p) for p in enqueue),
            heartbeat_s=self.heartbeat,
        )


def _given(value: Any, default: Any) -> Any:
    """``value`` unless the flag was left unset (``None``): 0 is what the user typed, not a request for the default."""
    return default if value is None else value


def _between(flag: str, low: int, high: int, why: str = "") -> Callable[[Any, bool], str]:
    return lambda value, _below: f"{flag} must be between {low} and {high}{why}, got {value}"


def _at_least(flag: str, low: int, high: int, why: str = "", fix: str = "") -> Callable[[Any, bool], str]:
    """Below ``low``: the floor alone (and ``fix``); above ``high``: the whole range."""
    return lambda value, below: (f"{flag} must be >= {low}{fix}, got {value}" if below
                                 else f"{flag} must be between {low} and {high}{why}, got {value}")


#: Which bad flag is named first: floors before ceilings for the counts, as ``tune`` has always checked them
#: (``<``: below the floor, ``>``: above the ceiling; a field without either: both).
_ORDER = ("top_k", "seed", "budget_restarts", "budget_minutes", "trials<", "max_restarts<", "verify_restarts<",
          "verify_rounds<", "trials>", "restarts", "max_restarts>", "verify_restarts>", "verify_rounds>", "min_effect",
          "power", "verify_margin")


def _rank(bad: tuple[str, bool]) -> int:
    name, below = bad
    side = name + ("<" if below else ">")
    return _ORDER.index(side) if side in _ORDER else _ORDER.index(name)


#: The one line for a value out of its field's bounds: ``(value, below the floor) -> line``.
_LINES: dict[str, Callable[[Any, bool], str]] = {
    "top_k": lambda value, below: (f"--top-k must be >= 1, got {value}; use --no-verify to skip verification" if below
                                   else f"--top-k must be between 1 and {MAX_TOP_K_FLAG} (configurations verified "
                                        f"at the end), got {value}"),
    "seed": _between("--seed", 0, MAX_SEED),
    "budget_restarts": _at_least("--budget-restarts", 1, MAX_BUDGET_RESTARTS, " engine starts"),
    "budget_minutes": lambda value, _below: (f"--budget-minutes must be a positive number of minutes, at most "
                                             f"{MAX_BUDGET_MINUTES} (a year), got {value:g}"),
    "trials": _at_least("--trials", 1, MAX_TRIALS),
    "max_restarts": _at_least("--max-restarts", 1, MAX_RESTARTS),
    "verify_restarts": _at_least("--verify-restarts", 1, MAX_RESTARTS),
    "verify_rounds": lambda value, below: (f"--verify-rounds must be >= 0 (0: fixed verification), got {value}"
                                           if below else f"--verify-rounds must be between 0 and {MAX_RESTARTS}, "
                                                         f"got {value}"),
    "restarts": _between("--restarts", 1, MAX_RESTARTS),
    "min_effect": lambda value, _below: (f"--min-effect must be a speedup above 1 and at most 10 (1.05 is 5%), "
                                         f"got {value:g}"),
    "power": lambda value, _below: f"--power must be at least 0.5 and below 1 (0.8 is 80%), got {value:g}",
    "verify_margin": lambda value, _below: (f"--verify-margin must be a fraction between 0 and 1 (0.03 is 3%), "
                                            f"got {value:g}"),
}
