"""``autotune track``: log a finished study to MLflow (one run with ``--no-mlflow`` elsewhere, copied back)."""

from __future__ import annotations

import argparse
import sys
from typing import IO

from autotune.cli._common import add_store_args, open_named_study
from autotune.core.exit_status import ExitStatus

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Log a finished study to MLflow (studies run with --no-mlflow elsewhere)."


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", required=True, help="the study to log (e.g. one copied back from a GPU box)")
    add_store_args(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default as for tune)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.observers.mlflow import TrackingError, log_study

    ledger = open_named_study(args)
    try:
        run_id = log_study(ledger, tracking_uri=args.tracking_uri)
    except TrackingError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)
        return ExitStatus.ERROR
    print(f"Logged study {args.study} to MLflow (parent run {run_id}); open it with `make ui`.", file=out)
    return ExitStatus.SUCCESS
