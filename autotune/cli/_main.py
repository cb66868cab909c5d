"""The ``autotune`` command: ``main -> raw_main -> program``, one exit status per outcome.

Subcommands: ``tune`` (run or resume a study; ``--gpus`` runs one worker per GPU), ``worker`` (join a study from
this or another machine), ``report`` (the ten-second table, ``--json``), ``track`` (log a study to MLflow),
``export`` (the winner as a ``vllm serve --config`` YAML, CLI flags or ``LLM`` kwargs), ``ui`` (the MLflow UI),
``audit`` (configured vs resolved for one configuration), ``bench`` and ``bench-scaling`` (the tuner on the
simulator). Each is one module of this package with ``configure_parser(parser)`` and ``run(args, out)``, listed
once in :data:`SUBCOMMANDS`; the parsed command line stops at ``run``, which builds typed options from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, NoReturn, cast

from autotune import __version__
from autotune.cli import audit, bench, bench_scaling, doctor, export, recheck, report, schema, track, tune, ui, worker
from autotune.cli._common import UsageError
from autotune.core.escape import EscapingStream
from autotune.core.exit_status import ExitStatus
from autotune.engines.process import interrupt_on_sigterm, stop_live

__all__ = ["SUBCOMMANDS", "Subcommand", "UsageError", "main", "raw_main"]


# -- the registry --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One ``autotune`` subcommand: its name, one line of help, its flags and what it runs."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, IO[str]], int]


#: Every subcommand, in the order ``--help`` lists them. A new one is a module with ``configure_parser`` and
#: ``run`` (importing shared helpers from :mod:`autotune.cli._common`, never from here) and one line below.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("tune", tune.HELP, tune.configure_parser, tune.run),
    Subcommand("worker", worker.HELP, worker.configure_parser, worker.run),
    Subcommand("report", report.HELP, report.configure_parser, report.run),
    Subcommand("track", track.HELP, track.configure_parser, track.run),
    Subcommand("export", export.HELP, export.configure_parser, export.run),
    Subcommand("ui", ui.HELP, ui.configure_parser, ui.run),
    Subcommand("audit", audit.HELP, audit.configure_parser, audit.run),
    Subcommand("recheck", recheck.HELP, recheck.configure_parser, recheck.run),
    Subcommand("bench", bench.HELP, bench.configure_parser, bench.run),
    Subcommand("bench-scaling", bench_scaling.HELP, bench_scaling.configure_parser, bench_scaling.run),
    Subcommand("schema", schema.HELP, schema.configure_parser, schema.run),
    Subcommand("doctor", doctor.HELP, doctor.configure_parser, doctor.run),
)


# -- main ------------------------------------------------------------------------------------------------


class _OneLineParser(argparse.ArgumentParser):
    """Bad input is one line naming the flag and the fix (the project's rule for every input): argparse's own error
    prints the whole usage block first, burying the line that matters under a dozen of flags."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="autotune",
        description="Bayesian-optimisation autotuner for vLLM: CUDA-graph capture x speculative decoding, "
        "measured across fresh restarts, verified against the baseline.",
    )
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.configure(p)
        p.set_defaults(handler=command.run)
    return parser


def program(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Run the chosen subcommand; bad input becomes a one-line error and a non-zero status."""
    from sqlalchemy.exc import SQLAlchemyError

    from autotune.engines import EngineError
    from autotune.machine import MachineFileError
    from autotune.store.fingerprint import FingerprintMismatch
    from autotune.store.health import StoreNotUsable
    from autotune.store.ledger import LedgerError
    from autotune.cli.preflight import PreflightError
    from autotune.core.redact import redact_text
    from autotune.config.space import SpaceError
    from autotune.report import ReportFormatError
    from autotune.study import BudgetTooSmall
    from autotune.store.studydir import NotOwned

    from autotune.store.disk_full import DiskFull, raise_if_disk_full

    from autotune.cli.preflight import check_command_paths, check_tracking_uri_of

    try:
        try:
            check_command_paths(args)  # every command's --workdir, before it runs
            check_tracking_uri_of(args)  # and its MLflow tracking URI
            return ExitStatus(args.handler(args, out))
        except Exception as exc:
            # A full disk under the storage or workdir: one line naming which (issue 22, FS01/FS04).
            raise_if_disk_full(exc, storage=getattr(args, "storage", None), workdir=getattr(args, "workdir", None))
            raise
    except DiskFull as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return ExitStatus.ERROR
    except (SpaceError, UsageError, LedgerError, PreflightError, StoreNotUsable, NotOwned, FingerprintMismatch,
            BudgetTooSmall, ReportFormatError) as exc:
        print(f"autotune: error: {redact_text(str(exc))}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    except (EngineError, MachineFileError) as exc:  # the engine or the machine: not the command line's fault
        print(f"autotune: error: {redact_text(str(exc))}", file=sys.stderr)
        return ExitStatus.ERROR
    except SQLAlchemyError as exc:
        # The store broke mid-command (disk full, a server gone): one line; what was stored before is kept.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"autotune: error: the study storage failed: {redact_text(first)[:300]}; check --storage and "
              "disk space, then run the same command again", file=sys.stderr)
        return ExitStatus.ERROR


def raw_main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> ExitStatus:
    """Parse ``argv`` and run; argparse errors exit 2 like every usage error."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return ExitStatus(exc.code if isinstance(exc.code, int) else ExitStatus.BAD_INPUT)
    # Everything a command prints passes one escaping function (issue 44): labels, study names, engine lines and
    # stored reports are other people's text, and a terminal acts on the escape sequences in them.
    stderr = sys.stderr
    sys.stderr = EscapingStream(stderr)
    try:
        # SIGTERM (docker stop, systemd, Slurm) takes Ctrl-C's path: engines stopped, the trial marked interrupted,
        # MLflow runs closed, the same command resumes.
        try:
            with interrupt_on_sigterm():
                try:
                    # A text stream (io.TextIOBase), which typeshed does not count as a typing.IO.
                    return program(args, cast(IO[str], EscapingStream(out or sys.stdout)))
                finally:
                    stop_live()  # an engine an interruption caught mid-start must not outlive autotune
        except KeyboardInterrupt as exc:
            name = getattr(exc, "signal_name", None)
            print(f"autotune: interrupted{f' by {name}' if name else ''}", file=sys.stderr)
            return ExitStatus.for_signal(getattr(exc, "signum", None))
    finally:
        sys.stderr = stderr


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point.

    A reader that closes the pipe early (``autotune report | head -1``) took what it wanted: no traceback, and
    nothing more is written (stdout goes to ``/dev/null``, so the interpreter's last flush cannot fail either).
    """
    try:
        status = int(raw_main(argv))
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitStatus.SUCCESS)
