"""``autotune report``: a study's result, the ten-second table (``--json`` for the same as JSON)."""

from __future__ import annotations

import argparse
import json
from typing import IO

from autotune.cli._common import add_store_args, open_named_study, write_json
from autotune.core.exit_status import ExitStatus

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Print a study's result (--json for the same as JSON)."


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", help="study name (default: the most recent study in the store)")
    add_store_args(p)
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="write JSON to PATH (or stdout)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.cli.preflight import check_output_path, dataset_path, protected_paths
    from autotune.core.redact import redact, redact_text
    from autotune.observers.mlflow import resolve_tracking_uri
    from autotune.report import build_report

    if args.json not in (None, "-"):
        check_output_path(args.json, "--json", links=False)
    study = open_named_study(args)
    if args.json not in (None, "-"):
        # Now that the study is open: never over its storage, the MLflow store, its space file or its dataset.
        meta = study.meta()
        check_output_path(args.json, "--json", protected_paths(
            storage=args.storage, tracking_uri=resolve_tracking_uri(), space_file=meta.space_file,
            dataset=dataset_path(meta.workload)))
    report = build_report(study)
    if args.json == "-":
        json.dump(redact(report.to_json()), out, indent=2, default=str)
        out.write("\n")
    else:
        print(redact_text(report.render()), file=out)
        if args.json:
            write_json(args.json, report.to_json())
    return ExitStatus.SUCCESS
