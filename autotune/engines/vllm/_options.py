"""The vllm engine's options (``engine: vllm:``), validated once when the engine is made (see the package
docstring for what each does)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from autotune.engines._options import SECONDS, Command, EngineOptions, Seconds, one_of, rule
from autotune.engines.vllm import _container

__all__ = ["MODES", "START_METHODS", "VllmOptions"]

MODES = ("offline", "serve")
START_METHODS = ("forkserver", "spawn")
#: Keys the search owns: setting them through extra_args would silently override the searched value.
SEARCHED_KEYS = ("compilation_config", "speculative_config")
#: Any number in a free-form option (``env`` values, ``extra_args``): finite and plausible, as in a space.
_MAX_NUMBER = 1e15

Text = Annotated[str, Field(min_length=1, pattern=r"\S")]
Number = Annotated[float, Field(ge=-_MAX_NUMBER, le=_MAX_NUMBER)]
Scalar = str | bool | int | Number
# Literals over tuples built at run time, which pydantic validates against; the type checker reads them as text.
if TYPE_CHECKING:
    Mode = str
    StartMethod = str
else:
    Mode, StartMethod = Literal[MODES], Literal[START_METHODS]


class VllmOptions(EngineOptions):
    """Validated engine options (see :mod:`autotune.engines.vllm`)."""

    ENGINE: ClassVar[str] = "vllm"

    python: Text | None = Field(None, description="a path like /opt/venv/bin/python")
    launcher: Command | None = Field(None, description="a command prefix ending in an interpreter, e.g. [docker, "
                                                       "run, -i, --rm, --gpus, all, IMAGE, python3]")
    mode: Mode = Field("offline", description=one_of(MODES))
    start_method: StartMethod | None = Field(
        None, description=one_of(START_METHODS))
    startup_timeout_s: Seconds = Field(900.0, description=SECONDS)
    measure_timeout_s: Seconds = Field(900.0, description=SECONDS)
    settle_timeout_s: Seconds = Field(300.0, description=SECONDS)
    env: dict[str, Scalar] = Field({}, description="a mapping of NAME: text or number")
    cache_root: Text | None = Field(None, description="a directory path")
    extra_args: dict[str, Any] = Field({}, description="a mapping of LLM arguments")
    image: Text | None = Field(None, description="a container image, e.g. nvcr.io/nvidia/vllm:25.11-py3")

    @field_validator("env")
    @classmethod
    def _env_as_text(cls, value: dict[str, Any]) -> dict[str, str]:
        # The process environment holds text; YAML's true is "true", as a shell would spell it.
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}

    def environment(self) -> dict[str, str]:
        """``env`` as a process gets it: every value text (:meth:`_env_as_text` made it so when validated)."""
        return {k: str(v) for k, v in self.env.items()}

    @field_validator("extra_args")
    @classmethod
    def _one_spelling(cls, value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, val in value.items():
            norm = str(key).replace("-", "_")
            if norm in SEARCHED_KEYS:
                raise rule(f"{cls.field('extra_args')}.{key} is set by the search; "
                           "declare it under 'search:' in the space instead")
            _finite(val, f"{cls.field('extra_args')}.{key}")
            out[norm] = val
        return out

    @model_validator(mode="after")
    def _interpreter_and_container(self) -> VllmOptions:
        if self.python is not None and self.launcher is not None:
            raise rule(f"{self.field('python')} and {self.field('launcher')} are both set; the launcher already "
                       "ends in its interpreter (e.g. [docker, run, -i, IMAGE, python3]): keep one")
        if self.start_method == "forkserver" and self.launcher is not None:
            raise rule(f"{self.field('start_method')} forkserver needs a local interpreter, but "
                       f"{self.field('launcher')} is set (a launcher such as docker cannot fork restarts); use "
                       f"{self.field('start_method')} spawn, or {self.field('python')} instead of the launcher")
        try:
            for part in self.launcher or ():
                _container.check_placeholders(part, self.field("launcher"), image=self.image)
            for key, value in self.env.items():
                # Text by now (_env_as_text); the field's type is what the file may hold.
                _container.check_placeholders(str(value), f"{self.field('env')}.{key}", image=self.image)
        except ValueError as exc:
            raise rule(str(exc)) from None
        if self.image and not any("{image}" in part for part in self.launcher or ()):
            raise rule(f"{self.field('image')} is set but {self.field('launcher')} does not run it; put \"{{image}}\" "
                       "in the launcher where the image goes (before the interpreter), or drop " + self.field("image"))
        return self

    def interpreter(self) -> list[str]:
        """The command prefix that runs Python where vLLM lives."""
        if self.launcher:
            return list(self.launcher)
        return [self.python or sys.executable]

    def interpreter_label(self) -> str:
        import shlex

        return shlex.join(self.interpreter())

    def resolved_start_method(self) -> str:
        """The option, else ``forkserver`` for a local interpreter and ``spawn`` for a launcher."""
        return self.start_method or ("spawn" if self.launcher else "forkserver")


def _finite(value: Any, field: str) -> None:
    """``extra_args`` go to vLLM as written: no NaN, infinity or absurd number among them."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not (
            math.isfinite(value) and abs(value) <= _MAX_NUMBER):
        raise rule(f"{field} must be a finite number within ±{_MAX_NUMBER:.0e}, got {value!r}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _finite(item, f"{field}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _finite(item, f"{field}[{i}]")
