"""``autotune ui``: the MLflow UI on 127.0.0.1 against the project's tracking store.

The server (``python -m mlflow server``) runs in its own process group, so Ctrl-C reaches only this process,
which then stops the whole group (MLflow starts uvicorn workers under it) and exits 0 without a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import IO, Any

from autotune.cli._common import UsageError
from autotune.engines.process import EngineProcess
from autotune.core.exit_status import ExitStatus

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "HELP", "configure_parser", "run", "server_command", "ui_url"]

HELP = "Start the MLflow UI on 127.0.0.1 against the project's store."

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
#: Seconds the server gets to stop after SIGTERM before its process group is killed.
STOP_GRACE_S = 10.0
_POLL_S = 0.5


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune ui``."""
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port (default: %(default)s)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help="interface to listen on (default: %(default)s, this machine only)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or sqlite:///mlruns/mlflow.db)")


def ui_url(host: str, port: int) -> str:
    """The address to open in a browser (a wildcard listen address is reached through loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    return f"http://{shown}:{port}"


def server_command(tracking_uri: str, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command line for ``tracking_uri`` (artifacts next to a SQLite store)."""
    from autotune.core.urls import sqlite_path

    # One worker and no request log: a personal UI, not a shared server.
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
           "--host", host, "--port", str(port), "--workers", "1", "--uvicorn-opts", "--no-access-log"]
    db = sqlite_path(tracking_uri)
    if db is not None:
        # Runs logged by autotune carry their own artifact location; these only cover runs made in the UI.
        store_dir = str(db.parent) or "."
        cmd += ["--default-artifact-root", store_dir, "--artifacts-destination", store_dir]
    return cmd


def _server_env() -> dict[str, str]:
    """The server's environment: MLflow's background job runner off (eight more processes, for GenAI jobs
    autotune never submits; on a 2-core machine they slow the UI's start-up several times over)."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # MLflow's own dependency deprecations are nothing a user of the UI can act on.
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    return env


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _check_address(host: str, port: int) -> None:
    """``--port`` a TCP port and ``--host`` an address this machine has, before anything is made (issue 44: a port
    of 99999 was an OverflowError traceback, and an unknown host was called "in use")."""
    from autotune.cli._common import UsageError

    if not 1 <= port <= 65535:
        raise UsageError(f"--port {port}: not a TCP port; give one from 1 to 65535, e.g. --port {DEFAULT_PORT}")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"--host {host!r}: not an address of this machine ({getattr(exc, 'strerror', None) or exc}); "
                         f"give an interface address, e.g. --host {DEFAULT_HOST}") from None


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class _Stopper:
    """SIGINT/SIGTERM handler: ask the server's process group to stop, remember that the user asked.

    Installed before the server starts, so a Ctrl-C at any moment stops it (a signal that arrives before
    :meth:`attach` is forwarded there). The handler only sends signals: waiting inside a handler could
    deadlock on ``Popen``'s internal lock, which the main loop may hold.
    """

    def __init__(self) -> None:
        self.proc: EngineProcess | None = None
        self.signal: int | None = None
        self.deadline = 0.0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Stopper:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)

    def attach(self, proc: EngineProcess) -> None:
        self.proc = proc
        if self.signal is not None:
            proc.signal_group(signal.SIGTERM)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
            self.deadline = time.monotonic() + STOP_GRACE_S
            if self.proc is not None:
                self.proc.signal_group(signal.SIGTERM)


def _supervise(proc: EngineProcess, stopper: _Stopper, url: str, out: IO[str]) -> int:
    """Wait for the server; announce it once it answers; stop its group on a signal. Returns its status."""
    announced = False
    while True:
        if stopper.signal is not None:
            return _stop(proc, stopper)
        try:
            return proc.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            pass
        if not announced and stopper.signal is None and _ready(url):
            print(f"MLflow UI ready: {url}  (Ctrl-C to stop)", file=out, flush=True)
            announced = True


def _stop(proc: EngineProcess, stopper: _Stopper) -> int:
    """The user asked to stop (SIGTERM went to the group already): what is left of the grace, then the kill."""
    proc.stop(grace_s=max(0.0, stopper.deadline - time.monotonic()))  # workers must not keep the port
    return 0


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Start the MLflow UI and keep it running until Ctrl-C.

    Returns:
        ``SUCCESS`` when stopped by Ctrl-C/SIGTERM; ``ERROR`` when the server exits by itself.

    Raises:
        UsageError: the port is taken.
    """
    from autotune.core.urls import sqlite_path
    from autotune.observers.mlflow import resolve_tracking_uri

    _check_address(args.host, args.port)
    uri = resolve_tracking_uri(args.tracking_uri)
    if uri.startswith(("http://", "https://")):
        print(f"The tracking URI {uri} is an MLflow server already: open it in a browser.", file=out)
        return ExitStatus.SUCCESS
    db = sqlite_path(uri)
    if not _port_free(args.host, args.port):
        raise UsageError(f"port {args.port} on {args.host} is in use (another MLflow UI?): pass --port N, "
                         f"e.g. make ui PORT={args.port + 1}")
    if db is not None:  # made once the flags are accepted (issue 44: nothing made for a refused command)
        db.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has no mlruns/ yet
    url = ui_url(args.host, args.port)
    where = f"{db} (artifacts under {db.parent}/)" if db is not None else uri
    print(f"Starting the MLflow UI on {url} for {where} ...", file=out, flush=True)
    with _Stopper() as stopper:
        # Own session = own process group: the terminal's Ctrl-C reaches only us, and we stop all of it.
        with EngineProcess(server_command(uri, args.host, args.port), env=_server_env()) as proc:
            # Leaving the block by any route stops the server's group: an unexpected error in here must not
            # leave an orphaned server behind.
            stopper.attach(proc)
            code = _supervise(proc, stopper, url, out)
    if code != 0:
        print(f"autotune: the MLflow server exited with status {code}; see its messages above", file=sys.stderr)
        return ExitStatus.ERROR
    print("MLflow UI stopped.", file=out)
    return ExitStatus.SUCCESS
