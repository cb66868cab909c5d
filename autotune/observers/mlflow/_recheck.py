"""``autotune recheck`` in MLflow: one nested run of the study's parent run per recheck.

The parent is the study's own (found by the id the ledger keeps, else by the study's uid tag, as every worker finds
it; created when the study never logged, as ``autotune track`` would). The child run carries the verdict then and
now, the speedups with their intervals, each configuration's mean today, what differs and the whole record as
``recheck.json``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from autotune.records import encode
from autotune.decisions.recheck import RecheckRecord
from autotune.observers.mlflow._conventions import (KIND_STUDY, TAG_CONFIG_KEY, TAG_KIND, TAG_LOGGED, TAG_STUDY,
                                                    TrackingError, _one_line, experiment_name, resolve_tracking_uri)
from autotune.observers.mlflow._session import _Session
from autotune.core.urls import redact_url
from autotune.store.ledger import Ledger

__all__ = ["KIND_RECHECK", "log_recheck"]

#: The ``autotune.kind`` of a recheck's run.
KIND_RECHECK = "recheck"


def _metrics(record: RecheckRecord) -> list[tuple[str, float, int]]:
    out = []
    for when, fig in (("then", record.then), ("now", record.now)):
        for key in ("speedup", "ci_low", "ci_high"):
            value = fig.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.append((f"{when}.{key}", float(value), 0))
    for label, mean in record.now.get("means", {}).items():
        if isinstance(mean, (int, float)) and math.isfinite(mean):
            out.append((f"now.mean.{label}"[:250].replace("[", "(").replace("]", ")").replace(",", "_")
                        .replace("=", "-"), float(mean), 0))
    for key in ("ratio", "low", "high"):  # the change test: today's speedup over the stored one (issue 44)
        value = record.change.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.append((f"change.{key}", float(value), 0))
    out.append(("holds", 1.0 if record.holds else 0.0, 0))
    return out


def log_recheck(ledger: Ledger, record: RecheckRecord, tracking_uri: str | None = None) -> str:
    """Log ``record`` as a nested run of the study's parent run. Returns the child run's id.

    Raises:
        TrackingError: MLflow is missing or the store cannot be used; the message names the fix.
    """
    try:
        session = _Session(tracking_uri)
        meta = ledger.meta()
        experiment_id = session.experiment_id(experiment_name(meta.model, meta.engine))
        parent_id, _ = session.open_parent(ledger, experiment_id, meta)
        index = len(ledger.rechecks())
        run_id = session.child_run(experiment_id, parent_id, f"recheck {index} {record.verdict}",
                                   {TAG_KIND: KIND_RECHECK, TAG_STUDY: ledger.name, TAG_CONFIG_KEY: record.when,
                                    "autotune.parent_kind": KIND_STUDY})
        params: dict[str, Any] = {"kind": record.kind, "checked": record.checked,
                                  "restarts_per_config": record.restarts_per_config, "seed_base": record.seed_base}
        tags = {"verdict": record.verdict, "stored_verdict": record.stored_verdict,
                "differences": "; ".join(record.differences)[:7000],
                "resolved_changes": "; ".join(record.resolved_changes)[:7000], TAG_LOGGED: "1"}
        session.log(run_id, params={k: str(v) for k, v in params.items()}, metrics=_metrics(record), tags=tags)
        session.log_text(run_id, json.dumps(encode(record), indent=2, default=str), "recheck.json")
        session.finish(run_id, "FINISHED")
        return run_id
    except TrackingError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line naming the store, not an MLflow traceback
        raise TrackingError(f"could not log the recheck of {ledger.name!r} to "
                            f"{redact_url(resolve_tracking_uri(tracking_uri))}: {_one_line(exc)}; check the "
                            "tracking URI (--tracking-uri)") from exc
