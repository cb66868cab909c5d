"""What autotune asks an engine for (:class:`EngineConfig`, in vLLM's own names), which engine ran
(:class:`EngineFacts`), and how what it resolved differs from what was asked. Public through
:mod:`autotune.core.records`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from autotune.core.params import ParamValue
from autotune.core.capture import captured_decode_requests
from autotune.core.redact import redact
from autotune.core.resolved import Detail, Difference, Resolved
from autotune.core.schedule import KSchedule, canonical_spec, schedule_differences, schedule_of
from autotune.records import decode, reader, record


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """One engine configuration, in vLLM's own names.

    ``engine_args`` are flat ``vllm serve`` / ``LLM(**kwargs)`` arguments with underscores (``max_num_seqs``);
    ``compilation_config`` holds only keys the search set (absent means "engine default");
    ``speculative_config`` is ``None`` when speculation is off.

    Attributes:
        engine_args: Fixed engine arguments (model, dtype, max_model_len, max_num_seqs, ...).
        compilation_config: e.g. ``{"cudagraph_mode": "PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4]}``.
        speculative_config: e.g. ``{"method": "ngram", "num_speculative_tokens": 3, ...}`` or ``None``.
        params: The searched parameters that produced this config (Optuna's names), for labels and plots.
        draft: Name of the space's draft option in use, or ``None``.
    """

    engine_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    compilation_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    speculative_config: Mapping[str, Any] | None = None
    params: Mapping[str, ParamValue] = dataclasses.field(default_factory=dict)
    draft: str | None = None

    def __post_init__(self) -> None:
        # One canonical K schedule, so equal schedules share a key and a label however they were written.
        object.__setattr__(self, "speculative_config", canonical_spec(self.speculative_config))

    # -- what the tuner looks at -------------------------------------------------------------------------
    @property
    def cudagraph_mode(self) -> str | None:
        """Configured cudagraph mode, ``None`` for the engine default."""
        return self.compilation_config.get("cudagraph_mode")

    @property
    def capture_sizes(self) -> tuple[int, ...] | None:
        """Configured capture sizes (sorted), ``None`` for the engine default."""
        sizes = self.compilation_config.get("cudagraph_capture_sizes")
        return None if sizes is None else tuple(sorted(int(s) for s in sizes))

    @property
    def decode_requests(self) -> tuple[int, ...] | None:
        """Configured decode graphs in requests (vLLM >= 0.34's ``decode_cudagraph_capture_request_sizes``)."""
        sizes = self.compilation_config.get("decode_cudagraph_capture_request_sizes")
        return None if sizes is None else tuple(sorted(int(s) for s in sizes))

    @property
    def prefill_sizes(self) -> tuple[int, ...] | None:
        """Configured prefill graphs in tokens (vLLM >= 0.34's ``prefill_cudagraph_capture_token_sizes``)."""
        sizes = self.compilation_config.get("prefill_cudagraph_capture_token_sizes")
        return None if sizes is None else tuple(sorted(int(s) for s in sizes))

    @property
    def num_speculative_tokens(self) -> int:
        """K, the draft tokens per step; 0 when speculation is off."""
        if not self.speculative_config:
            return 0
        return int(self.speculative_config.get("num_speculative_tokens", 0))

    @property
    def k_schedule(self) -> KSchedule | None:
        """K by batch size (``speculative_config.num_speculative_tokens_per_batch_size``), ``None`` for a fixed K."""
        return schedule_of(self.speculative_config)

    @property
    def spec_method(self) -> str | None:
        """The speculative method (``ngram``, ``draft_model``, ``eagle3``, ``mtp``...), ``None`` when off."""
        if not self.speculative_config:
            return None
        return self.speculative_config.get("method")

    def key(self) -> str:
        """A short stable identity: equal configs (whatever their params) share a key.

        Credentials do not take part (their values are redacted first), so a configuration and its stored,
        redacted copy share a key, and rotating a token does not make a configuration new.
        """
        body = _canonical_json(redact({
            "engine_args": self.engine_args,
            "compilation_config": self.compilation_config,
            "speculative_config": self.speculative_config,
        }))
        return hashlib.sha256(body.encode()).hexdigest()[:12]

    def label(self) -> str:
        """A one-line human name, e.g. ``PIECEWISE sizes=[4,8,16] ngram K=3``."""
        mode = self.cudagraph_mode or "default-mode"
        sizes = self.capture_sizes
        size_txt = "default-sizes" if sizes is None else f"sizes=[{','.join(map(str, sizes))}]"
        # vLLM >= 0.34's own fields: decode graphs in requests, prefill graphs in tokens, or a maximum alone.
        split = [(name, self.compilation_config.get(key)) for name, key in (
            ("requests", "decode_cudagraph_capture_request_sizes"), ("prefill", "prefill_cudagraph_capture_token_sizes"),
            ("max-requests", "max_decode_cudagraph_capture_requests"), ("max-size", "max_cudagraph_capture_size"),
            ("max-prefill", "max_prefill_cudagraph_capture_tokens"),
            ("max-decode-tokens", "max_decode_cudagraph_capture_tokens"))]
        split = [(name, value) for name, value in split if value is not None]
        if split:
            size_txt = " ".join(f"{name}={value}" if not isinstance(value, list)
                                else f"{name}=[{','.join(map(str, sorted(value)))}]" for name, value in split)
            if sizes is not None:
                size_txt = f"sizes=[{','.join(map(str, sizes))}] {size_txt}"
        schedule = self.k_schedule
        if self.num_speculative_tokens:
            k = self.num_speculative_tokens if schedule is None else schedule.text()
            spec = f"{self.draft or self.spec_method} K={k}"
        else:
            spec = "no-spec"
        searched = "".join(f" {k}={self.engine_args[k]}" for k in self.searched_engine_args())
        return f"{mode} {size_txt} {spec}{searched}"

    def searched_engine_args(self) -> list[str]:
        """Engine arguments the search set (those among ``params`` that are ``engine_args``), in params order."""
        return [k for k in self.params if k in self.engine_args]

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM(**kwargs)`` (the one translation the runner and export share)."""
        kwargs: dict[str, Any] = dict(self.engine_args)
        if self.compilation_config:
            kwargs["compilation_config"] = dict(self.compilation_config)
        if self.speculative_config:
            kwargs["speculative_config"] = dict(self.speculative_config)
        return kwargs


#: Stored as ``engine``, ``engine_version``, ``gpu``, ``driver``, ``cuda``, ``simulated`` (when true) and the extra
#: facts beside them; unknown facts are left out.
@record(omit_at_default=("name", "version", "gpu", "driver", "cuda", "simulated"),
        renamed={"name": "engine", "version": "engine_version"}, spread="extra")
@dataclasses.dataclass(frozen=True)
class EngineFacts:
    """Which engine ran, as far as it knows: what tracking tags, reports and exports name.

    Attributes:
        name: Registry name (``sim``, ``cmd``, ``vllm``).
        version: The engine's version (vLLM's for ``vllm`` and ``sim``).
        gpu: Accelerator name.
        driver: GPU driver version.
        cuda: CUDA version.
        simulated: Every number comes from the simulator.
        extra: Other engine-specific facts (``mode``, ``command``, ``profile``, ...).
    """

    name: str | None = None
    version: str | None = None
    gpu: str | None = None
    driver: str | None = None
    cuda: str | None = None
    simulated: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    #: Stored name -> field; older studies and engines used the alternatives.
    _ALIASES = {
        "engine": "name", "engine_version": "version", "version": "version", "vllm": "version",
        "gpu": "gpu", "gpu_name": "gpu", "device": "gpu", "driver": "driver", "driver_version": "driver",
        "cuda": "cuda", "cuda_version": "cuda", "simulated": "simulated",
    }

    @classmethod
    def of(cls, facts: EngineFacts | Mapping[str, Any] | None) -> EngineFacts:
        """``facts`` as :class:`EngineFacts` (an engine outside this package may still describe itself as a dict)."""
        return facts if isinstance(facts, EngineFacts) else decode(cls, facts or {})


def _normalise_mode(mode: Any) -> str | None:
    # vLLM prints enum members as "CUDAGraphMode.PIECEWISE"; compare on the bare name.
    if mode is None:
        return None
    return str(mode).rsplit(".", 1)[-1].upper()


def config_differences(config: EngineConfig, resolved: Resolved | None) -> list[Difference]:
    """Fields the engine resolved differently from what was configured.

    Fields the configuration set are compared with what ran. A field left to the engine has nothing to differ
    from, with one exception: a default capture mode that resolved to ``NONE`` (graphs silently off).
    """
    if resolved is None:
        return []
    diffs: list[Difference] = []
    want_mode = _normalise_mode(config.cudagraph_mode)
    got_mode = _normalise_mode(resolved.cudagraph_mode)
    if want_mode is not None and got_mode is not None and want_mode != got_mode:
        diffs.append(Difference("cudagraph_mode", want_mode, got_mode))
    elif want_mode is None and got_mode == "NONE":
        # The seed note's trap: nothing asked for eager execution, yet the engine turned graph capture off
        # (e.g. because speculation is on). An engine default is never "no graphs" on a GPU.
        diffs.append(Difference("cudagraph_mode", "default (graphs on)", got_mode))
    want_sizes = config.capture_sizes
    got_sizes = resolved.cudagraph_capture_sizes
    if resolved.details.get(Detail.PREFILL_CAPTURE_TOKENS) is not None:
        # vLLM >= 0.34 records every graph's tokens, decode graphs added: token sizes asked for are its prefill
        # graphs, and what became of the decode graphs is decode_graph_differences' to say.
        got_sizes = tuple(resolved.details[Detail.PREFILL_CAPTURE_TOKENS])
    if want_sizes is not None and got_sizes is not None and tuple(sorted(got_sizes)) != want_sizes:
        diffs.append(Difference("cudagraph_capture_sizes", list(want_sizes), sorted(got_sizes)))
    # Searched engine arguments, where the engine reported what it ran (details["engine_args"]).
    reported = dict(resolved.details.get(Detail.ENGINE_ARGS) or {})
    for key in config.searched_engine_args():
        if key in reported and reported[key] is not None and reported[key] != config.engine_args[key]:
            diffs.append(Difference(key, config.engine_args[key], reported[key]))
    return diffs + decode_graph_differences(config, resolved) + schedule_differences(
        config.k_schedule, config.cudagraph_mode, resolved)


#: Modes whose uniform decode batches replay decode graphs (vLLM >= 0.34 sets them in requests).
_DECODE_GRAPH_MODES = ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def _requests_text(requests: list[int], q: int) -> str:
    if not requests:
        return "no decode graph (decode batches run without a full graph)"
    return (f"{', '.join(map(str, requests))} request{'s' if requests != [1] else ''} = "
            f"{', '.join(str(r * q) for r in requests)} tokens")


#: The explicit maxima of vLLM >= 0.34 that bound decode graphs in tokens (the deprecated one and the decode budget).
_TOKEN_MAXIMA = ("max_cudagraph_capture_size", "max_decode_cudagraph_capture_tokens")


def decode_graph_differences(config: EngineConfig, resolved: Resolved) -> list[Difference]:
    """What vLLM >= 0.34 made of the decode graphs: the graphs it captures, from its resolved config (the request
    sizes it records, ``details["decode_cudagraph_capture_request_sizes"]``, within its decode token budget,
    ``details["max_decode_cudagraph_capture_tokens"]``, and its recorded maximum: :func:`captured_decode_requests`),
    against those the configuration asked for. An older engine reports no request sizes, and this says nothing.

    * Token sizes (the deprecated ``cudagraph_capture_sizes``) are rounded up to whole requests of 1+K, and a size
      whose rounded count passes the list's largest is dropped: the decode graphs then differ from the sizes asked
      for, while the token sizes it records (prefill and decode together) may look unchanged.
    * An explicit maximum drops graphs: ``max_cudagraph_capture_size`` or ``max_decode_cudagraph_capture_tokens``
      below one request of 1+K tokens leaves no decode graph (vLLM #54933; the budget even keeps the request list
      as it was), and a decode token budget below a request count the configuration lists (or the engine picked
      by its default or a request maximum) leaves that graph uncaptured while the recorded list still holds it.
      A token maximum alone that keeps some decode graphs is what it asks for ("graphs up to M tokens").
    * Request counts set in its own field (``decode_cudagraph_capture_request_sizes``) above ``max_num_seqs`` are
      dropped; no batch reaches them, so that is no change.
    """
    got = resolved.details.get(Detail.DECODE_CAPTURE_REQUESTS)
    mode = _normalise_mode(resolved.cudagraph_mode)
    if got is None or mode not in _DECODE_GRAPH_MODES:
        return []
    got = sorted(int(r) for r in got)
    k = resolved.details.get(Detail.NUM_SPECULATIVE_TOKENS)
    q = 1 + int(config.num_speculative_tokens if k is None else k or 0)
    seqs = dict(resolved.details.get(Detail.ENGINE_ARGS) or {}).get("max_num_seqs",
                                                                    config.engine_args.get("max_num_seqs"))
    # Request counts above max_num_seqs are no batch the engine ever runs: dropping them changes nothing.
    reachable = (lambda n: True) if not isinstance(seqs, int) else (lambda n: n <= seqs)  # noqa: E731
    budget = resolved.details.get(Detail.DECODE_CAPTURE_MAX_TOKENS)
    recorded_max = max(resolved.cudagraph_capture_sizes) if resolved.cudagraph_capture_sizes else None
    caps = [int(v) for v in (recorded_max, budget) if v]
    captured = got if not caps else captured_decode_requests(got, q, seqs if isinstance(seqs, int) else max(
        got, default=0), min(caps))
    listed = [n for n in got if reachable(n)]
    held = budget // q if isinstance(budget, int) else 0
    cut = "" if captured == listed or not isinstance(budget, int) else (
        f"; max_decode_cudagraph_capture_tokens={budget} holds {held or 'no'} request{'s' if held > 1 else ''} "
        f"of 1+K={q} tokens, while the engine still lists {listed}")
    wanted = config.decode_requests
    if wanted is not None:
        kept = [n for n in wanted if reachable(n)]
        if kept == captured:
            return []
        return [Difference("decode_graphs", _requests_text(kept, q), _requests_text(captured, q) + (
            f" ({cut[2:]})" if cut else ""))]
    sizes = config.capture_sizes
    if sizes is not None and (q > 1 or captured != listed):
        rounded = sorted({n for n in (-(-s // q) for s in sizes) if reachable(n)})
        if sorted({r * q for r in captured}) != sorted(s for s in sizes if reachable(-(-s // q))):
            dropped = [n for n in rounded if n not in captured]
            why = (f"rounded up to whole requests of 1+K={q}" if q > 1 else "") + (
                f"; {', '.join(str(n * q) for n in dropped)} tokens dropped, above the largest size {max(sizes)}"
                if dropped and not cut else "") + cut
            return [Difference("decode_graphs", f"{list(sizes)} tokens",
                               f"{_requests_text(captured, q)} ({why.removeprefix('; ')})")]
        return []
    comp = config.compilation_config
    maxima = [(name, comp[name]) for name in _TOKEN_MAXIMA if comp.get(name) is not None]
    if maxima and comp.get("max_decode_cudagraph_capture_requests") is None:
        # A token maximum alone asks for decode graphs up to so many tokens: only none at all is a silent change.
        if captured:
            return []
        name, largest = maxima[0]
        return [Difference("decode_graphs", f"up to {largest} tokens ({name})", _requests_text(captured, q) + (
            f" ({cut[2:]})" if cut else ""))]
    if captured != listed:  # the engine's own sizes (its default, or a request maximum) cut by a token maximum
        return [Difference("decode_graphs", _requests_text(listed, q), _requests_text(captured, q) + (
            f" ({cut[2:]})" if cut else ""))]
    return []


def speculation_plan_change(config: EngineConfig, resolved_mode: str | None,
                            mode_without_speculation: str | None) -> Difference | None:
    """The default capture mode that speculation changed: the seed note's trap in its most common form.

    A configuration that leaves ``cudagraph_mode`` to the engine and turns speculation on is compared with what
    the same defaults resolved to *without* speculation (``mode_without_speculation``, e.g. the baseline's).
    ``FULL_AND_PIECEWISE`` without speculation but ``PIECEWISE`` with it means the speculative trial ran with less
    graph coverage than its defaults promise, and nothing the user configured says so. ``None`` when the mode was
    configured, speculation is off, either side is unknown, or nothing changed. (Default *capture sizes* are left
    out: vLLM scales them with the number of draft tokens by design.)
    """
    if config.cudagraph_mode is not None or not config.num_speculative_tokens:
        return None
    got, reference = _normalise_mode(resolved_mode), _normalise_mode(mode_without_speculation)
    if got is None or reference is None or got == reference:
        return None
    return Difference("cudagraph_mode", f"default ({reference} without speculation)", got)


@reader(EngineFacts)
def _read_engine_facts(data: dict[str, Any]) -> dict[str, Any]:
    # Older studies and engines named the facts otherwise (EngineFacts._ALIASES); an empty fact is unknown, and
    # the first of a fact's names wins.
    out: dict[str, Any] = {}
    known: set[str] = set()
    for key, value in data.items():
        field = EngineFacts._ALIASES.get(key)
        if field is None:
            out[key] = value  # an extra fact
        elif value not in (None, "") and field not in known:
            known.add(field)
            stored = {"name": "engine", "version": "engine_version"}.get(field, field)
            out[stored] = bool(value) if field == "simulated" else value if field == "name" else str(value)
    return out
