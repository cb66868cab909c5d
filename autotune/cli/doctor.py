"""``autotune doctor [--space FILE]``: check the machine before a long study, and say what to fix.

Every check gives one line: ``ok`` (fine), ``note`` (worth knowing, nothing to do), ``warn`` (a study will run but
its numbers may be off) or ``FIX`` (a study would fail or endanger the host, with the fix). The exit status is
0 when nothing must be fixed and :attr:`~autotune.core.exit_status.ExitStatus.ERROR` otherwise; a bad
``--space`` is ``BAD_INPUT``. The machine's facts and rules are ``machine/``'s (:func:`~autotune.machine.
read_host_facts`, :func:`~autotune.machine.machine_findings`); this command adds what the space's engine asks of
the machine (:class:`~autotune.machine.EngineDemand`) and whether its interpreter imports vLLM. The facts are
gathered into a :class:`Facts` first, so the rules (:func:`findings`) can be checked against any machine's facts,
a GB10's included.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from autotune.core.exit_status import ExitStatus
from autotune.engines import EngineOptions, RawOptions, SimOptions, engine_settings
from autotune.engines.vllm import VllmEngine, VllmOptions
from autotune.engines.vllm.vocabulary import Vocabulary, from_introspection, introspect_source, recorded

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace
from autotune.machine import EngineDemand, Finding, HostFacts, machine_findings, read_host_facts, weights_bytes

__all__ = ["HELP", "Facts", "Finding", "configure_parser", "findings", "gather", "run", "weights_bytes"]

HELP = "Check the machine before a long study and say what to fix."

#: How long importing vLLM may take in the configured interpreter (a container pull is not waited for).
IMPORT_TIMEOUT_S = 180.0


@dataclasses.dataclass(frozen=True)
class Facts(HostFacts):
    """What the doctor read from the machine (:class:`~autotune.machine.HostFacts`) and the space. ``None``: not
    reported."""

    engine: str = "vllm"
    #: The engine's options as the engine validates them (its ``settings``).
    settings: EngineOptions = dataclasses.field(default_factory=lambda: engine_settings("vllm", {}))
    engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    weights_bytes: int | None = None
    interpreter: tuple[str, ...] = ()
    vllm_version: str | None = None
    vllm_error: str | None = None
    #: What that vLLM accepts (the simulated version's for sim).
    vocabulary: Vocabulary | None = None

    def demand(self) -> EngineDemand:
        """What the engine will ask of the machine: its memory floor and page-cache policy, the weights, and
        vLLM's admission fraction."""
        return EngineDemand(guarded=self.engine != "sim", memory_floor_gib=self.settings.memory_floor_gib,
                            page_cache=self.settings.page_cache, weights_bytes=self.weights_bytes,
                            gpu_memory_utilization=self.engine_args.get("gpu_memory_utilization"))


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune doctor``."""
    parser.add_argument("--space", help="the search space the study will run (its engine, model and memory "
                                        "settings are checked too)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Gather the facts, print one line a check, return the exit status."""
    space = None
    if getattr(args, "space", None):
        from autotune.cli._common import load_space_for

        space = load_space_for(args)  # as tune loads it: a bad space is the same line, status 2
    found = findings(gather(space))
    for finding in found:
        print(finding, file=out)
    to_fix = [f for f in found if f.level == "FIX"]
    if to_fix:
        print(f"doctor: {len(to_fix)} thing(s) to fix before a long study", file=out)
        return ExitStatus.ERROR
    print("doctor: nothing to fix", file=out)
    return ExitStatus.SUCCESS


# -- facts -----------------------------------------------------------------------------------------------


def gather(space: SearchSpace | None = None) -> Facts:
    """Read the machine (and, with a space, its engine's interpreter and model)."""
    engine = "vllm" if space is None else space.engine.default
    # As the study reads them (tune's build_engine), validated by the engine's own model (the space's sections
    # were checked when it was loaded, load_space_for).
    options = {} if space is None else space.engine.options(engine)
    settings = engine_settings(engine, options)
    engine_args = dict(getattr(space, "engine_args", None) or {})
    host = read_host_facts()
    interpreter: tuple[str, ...] = ()
    version = error = None
    if isinstance(settings, VllmOptions):  # engine == "vllm": its model validated the options
        # What vLLM is given: engine.vllm.extra_args over engine_args (the GB10 recipe sets its memory there).
        engine_args.update(settings.extra_args)
        with contextlib.ExitStack() as scratch:
            interpreter = _interpreter(settings, options, scratch)
            version, error, found = vllm_facts(interpreter)
        vocab = None if version is None else (from_introspection(found) if found else recorded(version))
    elif isinstance(settings, SimOptions):  # engine == "sim"
        vocab = recorded(settings.engine_version)
    else:
        vocab = None
    # The host's fields as they are (dataclasses.asdict would turn its MemInfo and GpuStates into dicts).
    machine = {field.name: getattr(host, field.name) for field in dataclasses.fields(HostFacts)}
    return Facts(
        **machine, engine=engine, settings=settings, engine_args=engine_args,
        weights_bytes=weights_bytes(engine_args.get("model")), interpreter=interpreter,
        vllm_version=version, vllm_error=error, vocabulary=vocab)


def _interpreter(settings: VllmOptions, options: RawOptions, scratch: contextlib.ExitStack) -> tuple[str, ...]:
    if any("{" in part for part in settings.launcher or ()):
        # Placeholders ({image}, {workdir}, ...) are the engine's to fill in (a throw-away directory, which
        # ``scratch`` removes after the import check, stands for the study's).
        from autotune.engines import make_engine

        engine = make_engine("vllm", None, **options)
        assert isinstance(engine, VllmEngine)  # what the registry makes for "vllm"
        scratch.callback(engine.close)
        scratch.enter_context(engine.throwaway_workdir())
        return tuple(engine.interpreter())
    return tuple(settings.interpreter())


def vllm_version(interpreter: Sequence[str]) -> tuple[str | None, str | None]:
    """``(version, None)`` when ``interpreter`` imports vLLM, else ``(None, why)``."""
    version, why, _ = vllm_facts(interpreter)
    return version, why


#: Run in vLLM's interpreter: what its config classes accept (one line), then its version (the last line).
_VLLM_FACTS = introspect_source() + """
import json, vllm
print("AUTOTUNE_VOCAB " + json.dumps(autotune_vocab()))
print(vllm.__version__)
"""


def vllm_facts(interpreter: Sequence[str]) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """``(version, None, vocabulary)`` when ``interpreter`` imports vLLM (the vocabulary its config classes give,
    ``None`` when they could not be read), else ``(None, why, None)``."""
    from autotune.engines.process import run_bounded

    # As an engine process: a launcher's container is stopped with it when the import hangs (issue 32).
    try:
        code, stdout, stderr = run_bounded([*interpreter, "-c", _VLLM_FACTS], IMPORT_TIMEOUT_S)
    except FileNotFoundError:
        return None, f"{interpreter[0]} does not exist", None
    except OSError as exc:
        return None, f"{interpreter[0]} cannot run ({exc.strerror or exc})", None
    if code is None:
        return None, f"importing vllm took more than {IMPORT_TIMEOUT_S:g} s", None
    if code == 0 and stdout.strip():
        lines = stdout.strip().splitlines()
        found = None
        for line in lines:
            if line.startswith("AUTOTUNE_VOCAB "):
                with contextlib.suppress(ValueError):
                    found = json.loads(line[len("AUTOTUNE_VOCAB "):])
        return lines[-1], None, found if isinstance(found, dict) else None
    # The reason is the last line, but not a client's usage hint: ``docker run`` with no daemon ends on "Run 'docker
    # run --help' for more information" after the line that matters ("Cannot connect to the Docker daemon ...").
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    reasons = [line for line in lines if not (line.startswith("Run '") and "--help" in line)]
    return None, (reasons or lines or [f"exit status {code}"])[-1][:200], None


# -- rules -----------------------------------------------------------------------------------------------


def findings(facts: Facts) -> list[Finding]:
    """The doctor's lines for ``facts``, in the order printed: the machine's (``machine.machine_findings``), then
    vLLM's."""
    return machine_findings(facts, facts.demand()) + _vllm(facts)


def _vllm(facts: Facts) -> list[Finding]:
    # What the search, the audit and the export will write for this vLLM (engines/vllm/vocabulary.py).
    vocab = [Finding("note", "vocabulary", line) for line in facts.vocabulary.lines()] if facts.vocabulary else []
    if facts.engine != "vllm":
        return [Finding("note", "vllm", f"not checked: the engine is {facts.engine}"), *vocab]
    where = " ".join(facts.interpreter)
    if facts.vllm_version is not None:
        return [Finding("ok", "vllm", f"{facts.vllm_version} in {where}"), *vocab]
    return [Finding("FIX", "vllm", f"{where} cannot import vllm ({facts.vllm_error}): install vllm there, or set "
                                   "engine.python / engine.launcher in the space")]
