"""The verification phase's stored records: its candidates, its restart plan, its sequential design, its conclusion.

A part of :class:`~autotune.store.ledger.Ledger` (a mixin: the ledger is still the one class that reads and writes
them, through its low-level ``_study_attr``/``_set_study``); kept apart so the ledger stays a readable size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.records import decoder, encode
from autotune.decisions.planning import RestartPlan
from autotune.decisions.sequential import SequentialPlan
from autotune.decisions.verification import Candidate, Verification
from autotune.store._stored import list_of, mapping, mapping_of, whole
from autotune.store._keys import (
    _VERIFICATION_KEY, _VERIFY_CANDIDATES_KEY, _VERIFY_EXTENSION_KEY, _VERIFY_PLAN_KEY, _VERIFY_PROGRESS_KEY,
    _VERIFY_SEQUENTIAL_KEY,
)

__all__ = ["VerificationRecords"]


class VerificationRecords:
    """Writers and readers of the verification's study attributes (mixed into the ledger)."""

    def _study_attr(self, key: str, default: Any = None) -> Any:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _set_study(self, key: str, value: Any) -> None:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _has_study(self, key: str) -> bool:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def _read(self, trial: Any, key: str, parse: Any, default: Any = None) -> Any:  # pragma: no cover - the ledger's
        raise NotImplementedError

    def verify_candidates(self) -> list[Candidate] | None:
        return self._read(None, _VERIFY_CANDIDATES_KEY, list_of(decoder(Candidate)))

    def record_verify_candidates(self, candidates: Sequence[Candidate]) -> None:
        self._set_study(_VERIFY_CANDIDATES_KEY, [encode(c) for c in candidates])

    def verify_plan(self) -> RestartPlan | None:
        """The restart plan fixed when verification started (``None``: the fixed design, or a study before it)."""
        return self._read(None, _VERIFY_PLAN_KEY, decoder(RestartPlan))

    def record_verify_plan(self, plan: RestartPlan) -> None:
        self._set_study(_VERIFY_PLAN_KEY, encode(plan))

    def verify_extension(self) -> int:
        """How many times a resume with a larger budget extended a concluded verification (0: never)."""
        return self._read(None, _VERIFY_EXTENSION_KEY, whole, 0)

    def record_verify_extension(self, extension: int) -> None:
        self._set_study(_VERIFY_EXTENSION_KEY, int(extension))

    def verify_sequential(self) -> SequentialPlan | None:
        return self._read(None, _VERIFY_SEQUENTIAL_KEY, decoder(SequentialPlan))

    def record_verify_sequential(self, plan: SequentialPlan) -> None:
        self._set_study(_VERIFY_SEQUENTIAL_KEY, encode(plan))

    def verify_progress(self) -> dict[str, list[dict[str, Any]]]:
        """Verification restarts a single-process autotune of an earlier version stored, by config key (this one
        stores them on the rounds' claims: ``Ledger.verify_rounds``)."""
        return self._read(None, _VERIFY_PROGRESS_KEY, mapping_of(list_of(mapping)), {})

    def verification(self) -> Verification | None:
        return self._read(None, _VERIFICATION_KEY, decoder(Verification))

    def has_verification(self) -> bool:
        """A verification is stored and no extension of it is under way (:meth:`verification_concluded`)."""
        return self._has_study(_VERIFICATION_KEY) and self.verification_concluded()

    def verification_concluded(self) -> bool:
        """The stored verification is the latest extension's (an extension under way has not concluded yet)."""
        verification = self.verification()
        return verification is not None and verification.extension >= self.verify_extension()

    def record_verification(self, verification: Verification) -> None:
        self._set_study(_VERIFICATION_KEY, encode(verification))
