"""The engine extension point: one abstract base class, one method that matters."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar, Protocol

from autotune.core import facts as F
from autotune.core.records import EngineConfig, EngineFacts, RestartResult, Workload
from autotune.engines._errors import EngineError, EngineOptionError
from autotune.engines._options import EngineOptions, OptionValue

if TYPE_CHECKING:
    from autotune.config.space import SearchSpace
    from autotune.engines.vllm.vocabulary import Vocabulary

__all__ = ["EngineBackend", "EngineError", "EngineOptionError", "RestartEngine"]


class RestartEngine(Protocol):
    """What the study starts a restart through (:func:`autotune.study._restart.measure_restart`): an
    :class:`EngineBackend`, or a recheck's two engines behind one ``run_restart``. An engine that also has
    ``learn_noise`` (every :class:`EngineBackend`) is handed each result for its warm-up noise prior."""

    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int,
                    seed: int) -> RestartResult: ...



class EngineBackend(abc.ABC):
    """Runs one restart of one configuration in a fresh engine process.

    Subclasses implement :meth:`run_restart`. Everything else has a sensible default.

    Args:
        cache_dir: A study-local directory the engine may use for compile caches and logs. Engines that
            model "cold" first starts of a configuration decide coldness from what is in here, as a real
            compile cache would.
        options: Engine-specific options from the search space's ``engine:`` section and the CLI.

    Attributes:
        warmup_noise: The study's warm-up noise prior (:class:`~autotune.engines.vllm._warmup.NoisePool`): the
            study adds every restart's timed passes (:meth:`learn_noise`); an engine hands ``warmup_noise.prior()``
            to its warm-up rule (the vLLM engine in the runner's request, the simulator to its passes). An engine
            may ignore it (the cmd engine does).
    """

    #: Registry name (``sim``, ``cmd``, ``vllm``).
    name: str = "base"
    #: What :meth:`least_start_s` says (0: no bound known).
    LEAST_START_S: float = 0.0
    #: The engine's options' strict model: :func:`autotune.engines.engine_settings` validates by it.
    Settings: ClassVar[type[EngineOptions]] = EngineOptions
    #: The options validated, once, when the engine is made (each engine keeps its own model's value).
    settings: EngineOptions

    def __init__(self, cache_dir: str | None = None, **options: OptionValue) -> None:
        self.cache_dir = cache_dir
        #: The options as given (validated into :attr:`settings`): what the study stores with its engine.
        self.options: dict[str, OptionValue] = dict(options)
        # The rule's stdlib module sits in the vLLM engine's package (its runner imports it by path); importing it
        # here at module level would import that package before this base class exists.
        from autotune.engines.vllm._warmup import NoisePool

        self.warmup_noise = NoisePool()

    def learn_noise(self, result: RestartResult) -> None:
        """Add ``result``'s timed passes (warm by the rule) to :attr:`warmup_noise`; failed restarts add nothing."""
        if result.ok:
            self.warmup_noise.add(result.passes_tok_s, result.facts.get(F.PASS_ROUNDS, 1))

    @abc.abstractmethod
    def run_restart(self, config: EngineConfig, workload: Workload, *, restart: int, seed: int) -> RestartResult:
        """Start a fresh engine with ``config``, warm up, time ``workload.timed_passes`` passes, stop it.

        Must not raise for a failing restart (crash, timeout, OOM, rejected config): return
        ``RestartResult(status="failed"|"timeout", error=...)`` instead.
        """

    def check(self, space: SearchSpace) -> None:
        """Validate ``space`` against what this engine needs before anything runs.

        Raises:
            autotune.config.space.SpaceError: naming the file, field and fix.
            EngineError: the engine itself is unusable.
        """

    def caches_empty(self) -> bool | None:
        """Whether the next start would find the engine's JIT caches empty (``None``: the engine does not know).

        The budget prices a start into empty caches apart from other cold starts (:mod:`autotune.study._budget`).
        """
        return None

    def least_start_s(self) -> float:
        """The fewest seconds any start of this engine takes, known before one is measured (0: no bound known).
        A minutes budget that cannot pay for the smallest study at this price is refused before any start
        (:func:`autotune.study._budget.check_budget`)."""
        return self.LEAST_START_S

    def describe(self) -> EngineFacts:
        """Facts for tracking: engine name and version, GPU name, driver, CUDA version, when known."""
        return EngineFacts(name=self.name)

    def vocabulary(self) -> Vocabulary | None:
        """The vLLM names this engine accepts (:class:`autotune.engines.vllm.vocabulary.Vocabulary`); ``None``: the
        engine takes configurations as the space writes them (``cmd``)."""
        return None

    def close(self) -> None:
        """Release anything held between restarts (nothing, for most engines)."""
