"""What a study measures: its space, model and engine, fingerprinted so a resume cannot silently mix two studies.

A study stores its fingerprint when it starts. Resuming with another ``--model``, another engine (or engine
version, GPU, simulator profile, wrapper command) or an edited space would put trials of two different
experiments into one table, compare them in verification and export the last one's model; instead the resume
stops with one line naming what differs and how to start a new study.

The space part is one digest per section (fixed engine arguments, workload, each searched dimension), so the
message names the sections that changed. Credentials take no part (they are redacted first): rotating a token is
not a new experiment. An engine fact that either side does not know (a vLLM that could not be probed) is not a
difference.

Digests added after studies were already stored (:data:`ADDED_DIGESTS`) are compared only when the stored
fingerprint has them: a study started before they existed still resumes, and one started since is checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from autotune.records import encode, reader
from autotune.core.records import EngineFacts
from autotune.core.redact import redact
from autotune.config.space import SearchSpace

__all__ = ["ADDED_DIGESTS", "Fingerprint", "FingerprintMismatch", "check_resume", "fingerprint"]

#: Space digests a stored fingerprint may lack (it was recorded before they existed): the searched engine
#: arguments' choices and ranges, and the prompts read from the dataset file.
ADDED_DIGESTS = ("search.engine_args", "workload.prompts", "search.k_schedules")


class FingerprintMismatch(Exception):
    """A resume with another space, model or engine than the study was started with; one line, with the fix."""


def _digest(value: Any) -> str:
    body = json.dumps(redact(value), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """A study's identity.

    Attributes:
        model: ``engine_args.model``.
        engine: Engine facts that identify what ran (name, version, GPU, profile, command...), redacted.
        space: Section name -> digest of the space's content (``engine_args`` without the model, ``workload``,
            ``search.cudagraph_mode``, ``search.capture_sizes``, ``search.num_speculative_tokens``,
            ``search.drafts``, ``search.engine_args``, ``workload.prompts``).
    """

    model: str | None
    engine: Mapping[str, Any]
    space: Mapping[str, str]

    def differences(self, now: Fingerprint) -> list[str]:
        """What differs between this (stored) fingerprint and ``now``, one short phrase each."""
        out = []
        if self.model != now.model:
            out.append(f"model {self.model!r} -> {now.model!r}")
        for key in sorted(set(self.engine) | set(now.engine)):
            before, after = self.engine.get(key), now.engine.get(key)
            if before is not None and after is not None and before != after:
                out.append(f"engine {key} {_short(before)} -> {_short(after)}")
        changed = [k for k in sorted(set(self.space) | set(now.space)) if self.space.get(k) != now.space.get(k)
                   and not (k in ADDED_DIGESTS and k not in self.space)]
        if changed:
            out.append(f"space sections changed: {', '.join(changed)}")
        return out


@reader(Fingerprint)
def _read_fingerprint(data: dict[str, Any]) -> dict[str, Any]:
    # A fingerprint missing a part compares as one that knows nothing of it.
    return {**data, "model": data.get("model"), "engine": data.get("engine") or {}, "space": data.get("space") or {}}


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint(space: SearchSpace, engine: EngineFacts | Mapping[str, Any]) -> Fingerprint:
    """The fingerprint of a study of ``space`` on ``engine`` (its facts as :meth:`EngineBackend.describe` gives)."""
    facts = EngineFacts.of(engine)
    engine_part = {k: v for k, v in redact(encode(facts)).items() if v is not None}
    args = {k: v for k, v in space.engine_args.items() if k != "model"}
    sections: dict[str, Any] = {
        "engine_args": args,
        "workload": encode(space.workload),
        "search.cudagraph_mode": list(space.modes),
        # (a choice's unit only where it is not tokens, so studies from before units keep their digest)
        "search.capture_sizes": [[s.name, s.sizes, s.pattern, s.max, *([s.unit] if s.unit != "tokens" else [])]
                                 for s in space.sizes],
        "search.num_speculative_tokens": [space.k_low, space.k_high],
        "search.drafts": [[d.name, dict(d.fragment), d.max_k] for d in space.drafts],
        # A resume with other choices or ranges would compare against values the search never ran, or fail
        # inside Optuna on a distribution that changed.
        "search.engine_args": [[d.name, d.choices, d.low, d.high, d.log, d.integer, d.baseline]
                               for d in space.engine_dims],
        # The file's path is in the workload; its prompts are here, so replacing its content is noticed.
        "workload.prompts": space.prompts_digest,
    }
    # K schedules searched by name, and whether one is derived from the load levels (a stored fingerprint from
    # before them lacks this digest: ADDED_DIGESTS).
    sections["search.k_schedules"] = [[[n, k.to_list()] for n, k in space.schedules], space.derive_schedule]
    if space.objective != "throughput":
        # Only when set: a throughput study keeps the fingerprint it had before objectives existed.
        sections["objective"] = space.objective
    model = space.engine_args.get("model")
    return Fingerprint(None if model is None else str(redact(str(model))), engine_part,
                       {name: _digest(value) for name, value in sections.items()})


def check_resume(stored: Fingerprint | None, now: Fingerprint, study_name: str) -> None:
    """Raise :class:`FingerprintMismatch` when a resumed study's fingerprint differs from the one it started with.

    A study without a stored fingerprint (started before fingerprints existed) is not checked.
    """
    if stored is None:
        return
    diffs = stored.differences(now)
    if diffs:
        raise FingerprintMismatch(
            f"study {study_name!r} was started with another setup ({'; '.join(diffs)}): resuming would mix two "
            f"experiments in one study; resume with the original setup, or start a new study with --study NEW-NAME "
            f"(or --fresh to delete this one and start over)")
