"""``autotune doctor [--space FILE]``: check the machine before a long study, and say what to fix.

Every check gives one line: ``ok`` (fine), ``note`` (worth knowing, nothing to do), ``warn`` (a study will run but
its numbers may be off) or ``FIX`` (a study would fail or endanger the host, with the fix). The exit status is
0 when nothing must be fixed and :attr:`~autotune.core.exit_status.ExitStatus.ERROR` otherwise; a bad
``--space`` is ``BAD_INPUT``. The facts are gathered into a :class:`Facts` first, so the rules
(:func:`findings`) can be checked against any machine's facts, a GB10's included.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import psutil

from autotune.core.exit_status import ExitStatus
from autotune.engines import EngineOptions, SimOptions, engine_settings
from autotune.engines.vllm import VllmEngine, VllmOptions
from autotune.engines.vllm.vocabulary import from_introspection, introspect_source, recorded
from autotune.machine import (
    GpuState,
    MachineFileError,
    MemInfo,
    cpu_clocks,
    driver_version,
    engine_floor,
    gib,
    gpu_states,
    is_unified_memory,
    plan_page_cache,
    read_meminfo,
    weights_bytes,
)

__all__ = ["Facts", "Finding", "configure_parser", "findings", "gather", "run", "weights_bytes"]

#: How long importing vLLM may take in the configured interpreter (a container pull is not waited for).
IMPORT_TIMEOUT_S = 180.0
#: Above this share of MemTotal the page cache is worth a warning on unified memory: vLLM counts it against the
#: KV budget there, so a cold start gets a smaller cache than a warm one (NVIDIA/xr-ai #462). Empirical.
PAGE_CACHE_WARN_FRACTION = 0.10
#: A CPU under the performance governor whose clock is below this share of its maximum is in a slow state.
CPU_SLOW_FRACTION = 0.70


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the doctor's output: ``level`` is ok, note, warn or FIX."""

    level: str
    topic: str
    text: str

    def __str__(self) -> str:
        return f"{self.level:<4}  {self.topic:<12} {self.text}"


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the doctor read from the machine (and the space). ``None``: not reported."""

    #: ``None``: the file could not be believed (:attr:`memory_error` says why).
    memory: MemInfo | None
    machine: str
    root: bool
    governors: tuple[str, ...] = ()
    cpu_mhz: float | None = None
    cpu_max_mhz: float | None = None
    gpus: tuple[GpuState, ...] | None = None
    driver: str | None = None
    engine: str = "vllm"
    #: The engine's options as the engine validates them (its ``settings``).
    settings: EngineOptions = dataclasses.field(default_factory=lambda: engine_settings("vllm", {}))
    engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    weights_bytes: int | None = None
    interpreter: tuple[str, ...] = ()
    vllm_version: str | None = None
    vllm_error: str | None = None
    #: What that vLLM accepts (``autotune.engines.vllm.vocabulary.Vocabulary``; the simulated version's for sim).
    vocabulary: Any = None
    memory_error: str | None = None


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune doctor``."""
    parser.add_argument("--space", help="the search space the study will run (its engine, model and memory "
                                        "settings are checked too)")


def run(args: argparse.Namespace, out: IO[str]) -> int:
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


def gather(space: Any = None) -> Facts:
    """Read the machine (and, with a space, its engine's interpreter and model)."""
    engine = "vllm" if space is None else space.engine.default
    # As the study reads them (tune's build_engine), validated by the engine's own model (the space's sections
    # were checked when it was loaded, load_space_for).
    options = {} if space is None else space.engine.options(engine)
    settings = engine_settings(engine, options)
    engine_args = dict(getattr(space, "engine_args", None) or {})
    freqs = _cpu_freqs()
    states = gpu_states()
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
    try:
        memory, memory_error = read_meminfo(), None
    except MachineFileError as exc:  # a FIX line naming the file, not a traceback (issue 44)
        memory, memory_error = None, str(exc)
    return Facts(
        memory=memory, memory_error=memory_error, machine=platform.machine(), root=os.geteuid() == 0, governors=_governors(),
        cpu_mhz=freqs[0], cpu_max_mhz=freqs[1], gpus=None if states is None else tuple(states),
        driver=driver_version(), engine=engine, settings=settings, engine_args=engine_args,
        weights_bytes=weights_bytes(engine_args.get("model")), interpreter=interpreter,
        vllm_version=version, vllm_error=error, vocabulary=vocab)


def _interpreter(settings: Any, options: Mapping[str, Any], scratch: contextlib.ExitStack) -> tuple[str, ...]:
    if any("{" in part for part in settings.launcher or ()):
        # Placeholders ({image}, {workdir}, ...) are the engine's to fill in (a throw-away directory, which
        # ``scratch`` removes after the import check, stands for the study's).
        from autotune.engines import make_engine

        engine = make_engine("vllm", **options)
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


def _governors() -> tuple[str, ...]:
    found = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor"):
        try:
            found.add(Path(path).read_text().strip())
        except OSError:
            continue
    return tuple(sorted(found))


def _cpu_freqs() -> tuple[float | None, float | None]:
    """Mean current clock over cores and the highest maximum, MHz (``machine.cpu_clocks``: a damaged
    ``/proc/cpuinfo`` is a clock not reported)."""
    clocks = cpu_clocks(psutil.cpu_freq)
    current = [c for c, _ in clocks if c is not None]
    maxima = [m for _, m in clocks if m is not None]
    return (sum(current) / len(current) if current else None), (max(maxima) if maxima else None)


# -- rules -----------------------------------------------------------------------------------------------


def findings(facts: Facts) -> list[Finding]:
    """The doctor's lines for ``facts``, in the order printed."""
    mem = facts.memory
    if mem is None:
        # Without the host's memory figures neither the guard nor the settle can work: the one thing to fix first.
        first = [Finding("FIX", "memory", facts.memory_error or "/proc/meminfo could not be read")]
        return first + _cpu(facts) + _gpu(facts, False) + _vllm(facts)
    unified = is_unified_memory(list(facts.gpus) if facts.gpus else None, mem.total, facts.machine)
    out: list[Finding] = []
    out += _memory(facts, unified)
    out += _page_cache(facts, unified)
    out += _cpu(facts)
    out += _gpu(facts, unified)
    out += _root(facts)
    out += _vllm(facts)
    return out


def _memory(facts: Facts, unified: bool) -> list[Finding]:
    mem = facts.memory
    assert mem is not None  # findings() reads no rule of memory without it
    floor = engine_floor(facts.settings.memory_floor_gib, mem.total)
    have = f"MemAvailable {gib(mem.available)} of {gib(mem.total)}; the guard's floor is {gib(floor)}"
    out = []
    if facts.engine != "sim" and mem.available <= floor:
        out.append(Finding("FIX", "memory", f"{have}: every engine start would be killed at once; free memory "
                                            "(see the largest processes with `ps aux --sort=-rss | head`)"))
    elif facts.weights_bytes is not None and unified and mem.available < floor + facts.weights_bytes:
        out.append(Finding("FIX", "memory", f"{have}; the weights ({gib(facts.weights_bytes)}) share that memory "
                                            "and would push it under the floor: free memory or choose a smaller "
                                            "model"))
    elif facts.weights_bytes is not None:
        out.append(Finding("ok", "memory", f"{have}; the weights take {gib(facts.weights_bytes)}"))
    else:
        out.append(Finding("ok", "memory", f"{have} (the space names no local model to size)"))
    util = facts.engine_args.get("gpu_memory_utilization")
    if unified and isinstance(util, (int, float)) and not isinstance(util, bool):
        # vLLM refuses to start when free memory is below total x gpu_memory_utilization, even with
        # kv_cache_memory_bytes; on an integrated GPU "free" is MemAvailable (vllm #35356).
        need = util * mem.total
        if mem.available < need:
            fits = max(0.0, mem.available / mem.total - 0.02)
            out.append(Finding("FIX", "admission", f"gpu_memory_utilization {util:g} needs {gib(need)} free at "
                                                   f"start but MemAvailable is {gib(mem.available)}: vLLM will "
                                                   f"refuse to start; set it to {fits:.2f} or less, or free memory"))
        else:
            out.append(Finding("ok", "admission", f"gpu_memory_utilization {util:g} needs {gib(need)} free; "
                                                  f"{gib(mem.available)} is"))
    return out


def _page_cache_plan(facts: Facts, unified: bool) -> Any:
    """The policy a real engine would apply here (``autotune.machine.plan_page_cache``; the value was validated
    with the engine's options)."""
    return plan_page_cache(facts.settings.page_cache, unified=unified, root=facts.root)


def _page_cache(facts: Facts, unified: bool) -> list[Finding]:
    mem = facts.memory
    assert mem is not None  # findings() reads no rule of memory without it
    text = f"Cached {gib(mem.cached)} ({mem.cached / mem.total:.0%} of MemTotal)"
    plan = _page_cache_plan(facts, unified)
    if facts.engine != "sim":
        text += f"; engine.page_cache is {plan.policy}"
    if unified and mem.cached > PAGE_CACHE_WARN_FRACTION * mem.total and plan.policy == "keep":
        return [Finding("warn", "page cache", f"{text}: on unified memory vLLM counts it against the KV budget, so "
                                              "cold and warm starts get different KV caches; run as root for "
                                              "page_cache: warm, or `sync; echo 3 | sudo tee "
                                              "/proc/sys/vm/drop_caches` before the study")]
    return [Finding("ok", "page cache", text)]


def _cpu(facts: Facts) -> list[Finding]:
    gov = ", ".join(facts.governors) or "not reported"
    if facts.cpu_mhz is None:
        return [Finding("note", "cpu", f"governor {gov}; clock not reported")]
    clock = f"{facts.cpu_mhz:.0f} MHz" + (f" of {facts.cpu_max_mhz:.0f} MHz max" if facts.cpu_max_mhz else "")
    if facts.governors and facts.governors != ("performance",):
        return [Finding("warn", "cpu", f"governor {gov}, clock {clock}: restarts may run at different clocks; "
                                       "set the performance governor (`sudo cpupower frequency-set -g performance`)")]
    if facts.cpu_max_mhz and facts.cpu_mhz < CPU_SLOW_FRACTION * facts.cpu_max_mhz:
        return [Finding("warn", "cpu", f"governor {gov} but clock {clock}: a slow state (GB10 CPUs have stuck near "
                                       "1.5 GHz); check with sysbench, reboot if it stays")]
    return [Finding("ok", "cpu", f"governor {gov}, clock {clock}")]


def _gpu(facts: Facts, unified: bool) -> list[Finding]:
    out = [Finding("note" if facts.driver is None else "ok", "driver", facts.driver or "not reported (no NVIDIA "
                                                                                      "driver or NVML)")]
    if not facts.gpus:
        out.append(Finding("note", "gpu", "none reported by NVML"))
    for g in facts.gpus or ():
        clock = "SM clock not reported" if g.sm_clock_mhz is None else (
            f"SM {g.sm_clock_mhz} MHz" + (f" of {g.max_sm_clock_mhz} max" if g.max_sm_clock_mhz else ""))
        extra = "".join([f", {g.temperature_c} C" if g.temperature_c is not None else "",
                         f", {g.power_w:.0f} W" if g.power_w is not None else ""])
        if g.throttle:
            out.append(Finding("warn", f"gpu {g.index}", f"{g.name}: {clock}{extra}; throttled: "
                                                         f"{', '.join(g.throttle)} (check cooling and power, or "
                                                         "lock clocks with nvidia-smi -lgc)"))
        else:
            out.append(Finding("ok", f"gpu {g.index}", f"{g.name}: {clock}{extra}; not throttled"))
    if not facts.gpus:
        # No GPU is no claim about one (issue 44: "the GPU has its own memory" on a machine without any).
        out.append(Finding("note", "unified", "not applicable: no GPU reported, so nothing shares host memory with "
                                              "one"))
    else:
        out.append(Finding("ok", "unified", "yes: the GPU allocates from host memory (the guard and settle matter "
                                            "most here)" if unified else "no: the GPU has its own memory"))
    return out


def _root(facts: Facts) -> list[Finding]:
    total = facts.memory.total if facts.memory is not None else 0
    unified = is_unified_memory(list(facts.gpus) if facts.gpus else None, total, facts.machine)
    plan = _page_cache_plan(facts, unified)
    if facts.root:
        return [Finding("ok", "root", "yes: page_cache drop and warm can write /proc/sys/vm/drop_caches")]
    refusal = plan.refusal()
    if refusal is not None:
        return [Finding("FIX", "root", f"no, and {refusal}")]
    note = None if isinstance(plan, str) else plan.note()
    return [Finding("note", "root", f"no: {note}" if note else "no: page_cache drop and warm would be refused "
                                                              "(keep needs no root)")]


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
