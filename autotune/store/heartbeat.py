"""Liveness through the storage: Optuna heartbeats for every trial this process holds.

Several workers share a study, so "a trial left RUNNING" no longer means "a process that died": it may be a live
peer's. Optuna's answer is the heartbeat (``RDBStorage(heartbeat_interval=..., grace_period=...)``): a live
process records a heartbeat for its running trial every interval; :func:`optuna.storages.fail_stale_trials`
fails a trial whose heartbeat is older than the grace period and hands it to the storage's stale-trial
callback (:class:`optuna.storages.RetryHeartbeatStaleTrialCallback` queues it again).

``Study.optimize`` runs that heartbeat thread itself, one trial at a time; autotune uses ask/tell and holds more
than one trial at once (a search trial, or a verification claim while it waits for another), so
:class:`Heartbeat` is one daemon thread that calls the storage's own ``record_heartbeat`` for each held trial.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from optuna.storages._heartbeat import is_heartbeat_enabled

__all__ = ["Heartbeat"]

_log = logging.getLogger(__name__)


class Heartbeat:
    """Records a heartbeat for every held trial every ``storage.heartbeat_interval`` seconds.

    Does nothing on a storage without heartbeats (``memory``: one process, nothing to detect).

    Args:
        storage: The study's Optuna storage.
    """

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.enabled = is_heartbeat_enabled(storage)  # a BaseHeartbeat whose interval is set
        self.interval = float(storage.get_heartbeat_interval()) if self.enabled else 0.0
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Heartbeats that could not be recorded (the storage was unreachable); a run of them makes peers
        #: fail this process's trials, which the process learns when it next writes to one.
        self.failures = 0

    def hold(self, trial_id: int) -> None:
        """Start beating for ``trial_id`` (a first heartbeat now, so it is never without one for long)."""
        if not self.enabled:
            return
        with self._lock:
            self._held.add(trial_id)
        self._beat(trial_id)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="autotune-heartbeat", daemon=True)
            self._thread.start()

    def release(self, trial_id: int) -> None:
        """Stop beating for ``trial_id`` (it finished, or this process gave it up)."""
        with self._lock:
            self._held.discard(trial_id)

    def close(self) -> None:
        """Stop the thread; held trials go stale after the grace period unless finished first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)
            self._thread = None

    def _beat(self, trial_id: int) -> None:
        try:
            self._storage.record_heartbeat(trial_id)
        except Exception as exc:  # noqa: BLE001 - a storage hiccup must not kill the thread; peers judge staleness
            self.failures += 1
            _log.warning("heartbeat for trial id %s not recorded: %s", trial_id, exc)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                held = sorted(self._held)
            for trial_id in held:
                self._beat(trial_id)
