"""Engine options as typed models: an engine's ``engine:`` section is validated once, when the engine is made.

Every engine's options derive from :class:`EngineOptions`: strict (YAML's ``"300"`` is not a number, ``true`` is
not 1), no unknown key, and every number finite and bounded (issue 32): a wait is a number of seconds over 0 and
at most :data:`~autotune.machine.MAX_WAIT_S`, the memory floor at most :data:`MAX_FLOOR_GIB`. The engine keeps the
model as ``engine.settings`` and reads it by attribute; ``doctor`` and ``audit`` read the same model
(:func:`autotune.engines.engine_settings`), so no rule is spelt twice. A bad value is one line naming
``engine.<engine>.<field>``, what it must be and the value given (:meth:`EngineOptions.parse`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from autotune.core.secrets import literal_secret_line
from autotune.engines import _sim_model as sim_model
from autotune.engines import _sim_plan as sim_plan
from autotune.engines.drift import PRESETS as DRIFT_PRESETS
from autotune.engines._errors import EngineOptionError
from autotune.machine import MAX_WAIT_S, PAGE_CACHE_POLICIES

__all__ = ["CmdOptions", "Command", "EngineOptions", "OptionValue", "RawOptions", "Seconds", "SimOptions", "one_of",
           "rule"]

#: One engine option as the space's ``engine:`` section or ``--engine-opt`` writes it (YAML's scalars, lists and
#: mappings): unchecked until the engine's model validates it, so a reader must look at it before using it.
OptionValue = object
#: An engine's options as given: what an engine is made from (:func:`autotune.engines.make_engine`), what a study
#: stores with its engine and a recheck makes the engine from again; :meth:`EngineOptions.parse` types them.
RawOptions = Mapping[str, OptionValue]

#: The highest memory floor a space may give, in GiB: above any host's memory (a floor above this machine's
#: MemTotal is refused when the engine is made, :class:`~autotune.machine.StartSafety`), far below a typo's 1e300.
MAX_FLOOR_GIB = 65_536.0
SECONDS = f"a number of seconds over 0 and at most {MAX_WAIT_S:g} (a day)"
FLOOR = f"a number of GiB from 0 (no floor) to {MAX_FLOOR_GIB:g}"

Seconds = Annotated[float, Field(gt=0.0, le=MAX_WAIT_S)]
FloorGib = Annotated[float, Field(ge=0.0, le=MAX_FLOOR_GIB)]
# Literals over tuples built at run time, which pydantic validates against; the type checker reads them as text.
if TYPE_CHECKING:
    PageCache = str
else:
    PageCache = Literal[PAGE_CACHE_POLICIES]


def one_of(choices: Iterable[str]) -> str:
    return "one of " + ", ".join(choices)


def rule(message: str) -> PydanticCustomError:
    """A rule across fields (or one a type cannot say) broken: ``message`` is the whole line after the engine."""
    return PydanticCustomError("engine_rule", message)


class EngineOptions(BaseModel):
    """The shared strict base; a subclass names its engine in :attr:`ENGINE` and describes each field (the
    description says what the field must be, for the one-line error)."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)
    ENGINE: ClassVar[str] = "base"

    memory_floor_gib: FloorGib | None = Field(None, description=FLOOR)
    page_cache: PageCache | None = Field(None, description=one_of(PAGE_CACHE_POLICIES))

    @classmethod
    def parse(cls, options: RawOptions) -> Self:
        """Validate raw options (the space's section, ``--engine-opt`` over it).

        Raises:
            EngineOptionError: one line, ``<engine> engine: engine.<engine>.<field> ...`` and the fix.
        """
        # A credential in an option (a token in env, --api-key in a command) is a reference (``${API_KEY}``),
        # resolved when a process starts; a literal would be stored with the study's engine (autotune.core.secrets).
        literal = literal_secret_line(dict(options), f"engine.{cls.ENGINE}")
        if literal is not None:
            raise EngineOptionError(f"{cls.ENGINE} engine: {literal}")
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise EngineOptionError(f"{cls.ENGINE} engine: {cls.problem(exc, options)}") from None

    @classmethod
    def field(cls, key: object) -> str:
        """Where ``key`` is written in a space: ``engine.<engine>.<key>``."""
        return f"engine.{cls.ENGINE}.{key}"

    @classmethod
    def problem(cls, exc: ValidationError, options: RawOptions) -> str:
        """The first error of ``exc`` as one line (without the engine prefix)."""
        error = exc.errors(include_url=False)[0]
        kind, loc = error["type"], tuple(error["loc"])
        if kind == "engine_rule" or not loc:
            return str(error["msg"])
        key = str(loc[0])  # a model's own field: always a name, never a list index
        if kind == "extra_forbidden":
            valid = ", ".join(cls.field(k) for k in cls.model_fields)
            return f"unknown option {cls.field(key)}; valid keys: {valid}"
        value = options.get(key)
        return f"{cls.field(key)} must be {cls.model_fields[key].description}, got {value!r}"

    def without_defaults(self) -> dict[str, OptionValue]:
        """The options that were given (what a study records and a recheck makes its engine from)."""
        return self.model_dump(exclude_unset=True)


#: The simulator's hardware profiles; ``random`` draws a landscape from ``landscape_seed``.
PROFILES = (*sorted(sim_model.HARDWARE), "random")
MODELS = tuple(sorted(sim_model.MODELS))
#: The simulator's machines: ``off`` (restarts independent, as before issue 41) or a drifting machine's preset.
DRIFTS = ("off", *sorted(DRIFT_PRESETS))
if TYPE_CHECKING:  # as PageCache
    Profile = str
    ModelProfile = str
    Drift = str
else:
    Profile, ModelProfile, Drift = Literal[PROFILES], Literal[MODELS], Literal[DRIFTS]


class SimOptions(EngineOptions):
    """The simulator's options (``engine: sim:``); see :class:`~autotune.engines.sim.SimEngine`."""

    ENGINE: ClassVar[str] = "sim"
    #: The profile that draws its landscape from ``landscape_seed`` instead of the physics model's constants.
    RANDOM: ClassVar[str] = "random"

    profile: Profile = Field("h200", description=one_of(PROFILES))
    model_profile: ModelProfile = Field("dense", description=one_of(MODELS))
    engine_version: str = Field("0.26.0", description='a vLLM version text, e.g. "0.26.0"')
    noise: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        None, description="a relative sd from 0 to 1 (e.g. 0.03; unset: the profile's)")
    time_scale: Annotated[float, Field(ge=0.0, le=1000.0)] = Field(
        0.0, description="a number >= 0 (real seconds per simulated second, e.g. 0.01) and at most 1000")
    landscape_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(
        0, description="an integer from 0 to 2**32-1 (e.g. 7; profile random only)")
    landscape_shift: Annotated[float, Field(ge=0.0, lt=2.0)] = Field(
        0.0, description="a number from 0 to 2 (e.g. 0.1; profile random only)")
    unified_memory: bool = Field(False, description="true or false")
    drift: Drift = Field("off", description=one_of(DRIFTS))
    drift_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = Field(
        0, description="an integer from 0 to 2**32-1 (e.g. 7; with drift only: which path the machine's level takes)")

    @field_validator("engine_version")
    @classmethod
    def _a_version(cls, value: str) -> str:
        try:
            sim_plan.parse_version(value)
        except ValueError:
            raise rule(f"{cls.field('engine_version')} {value!r} is not a version; write e.g. \"0.26.0\"") from None
        return value


def _split_command(value: object) -> object:
    """A command as a list, or as one shell-style string split like a shell."""
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError:
            return value  # unbalanced quotes: refused as "must be ..." with the text given
    return tuple(value) if isinstance(value, list) else value


Command = Annotated[tuple[Annotated[str, Field(min_length=1)], ...], BeforeValidator(_split_command),
                    Field(min_length=1)]


class CmdOptions(EngineOptions):
    """The ``cmd`` engine's options; see :class:`~autotune.engines.cmd.CmdEngine`."""

    ENGINE: ClassVar[str] = "cmd"

    command: Command = Field(description="the command that runs one restart, as a list of strings or one "
                                         "shell-style string, e.g. [python, examples/cmd_engine_example.py]")
    timeout_s: Seconds = Field(1800.0, description=SECONDS)
    kill_grace_s: Seconds = Field(5.0, description=SECONDS)
    settle_timeout_s: Seconds = Field(300.0, description=SECONDS)

    @classmethod
    def problem(cls, exc: ValidationError, options: RawOptions) -> str:
        error = exc.errors(include_url=False)[0]
        if error["type"] == "missing" and tuple(error["loc"]) == ("command",):
            return (f"{cls.field('command')} is missing; set it to the command that runs one restart, "
                    "e.g. command: [python, examples/cmd_engine_example.py]")
        return super().problem(exc, options)
