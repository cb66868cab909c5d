"""``autotune report``: a study's result, the ten-second table (``--json`` for the same as JSON; ``--from-json`` for
the table of a report JSON written earlier, without the study's store)."""

from __future__ import annotations

import argparse
import json
from typing import IO

from autotune.cli._common import UsageError, add_store_args, open_named_study, write_json
from autotune.core.exit_status import ExitStatus
from autotune.core.urls import StorageUrl

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Print a study's result (--json for the same as JSON)."


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", help="study name (default: the most recent study in the store)")
    add_store_args(p)
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="write JSON to PATH (or stdout)")
    p.add_argument("--from-json", metavar="FILE", help="print the report a --json FILE holds, instead of a stored "
                   "study's (the same table the study printed)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    from autotune.cli.preflight import check_output_path, dataset_path, protected_paths
    from autotune.core.redact import redact, redact_text
    from autotune.observers.mlflow import resolve_tracking_uri
    from autotune.report import build_report, read_report, report_json

    if args.from_json is not None:
        if args.study is not None or args.json is not None:
            raise UsageError("--from-json prints a stored report JSON as it is: drop "
                             + ("--study" if args.study is not None else "--json")
                             + " (copy the file to have it elsewhere)")
        print(redact_text(read_report(args.from_json).render()), file=out)
        return ExitStatus.SUCCESS
    if args.json not in (None, "-"):
        check_output_path(args.json, "--json", links=False)
    study = open_named_study(args)
    if args.json not in (None, "-"):
        # Now that the study is open: never over its storage, the MLflow store, its space file or its dataset.
        meta = study.meta()
        check_output_path(args.json, "--json", protected_paths(
            storage=StorageUrl.parse(args.storage), tracking_uri=resolve_tracking_uri(), space_file=meta.space_file,
            dataset=dataset_path(meta.workload)))
    report = build_report(study)
    if args.json == "-":
        json.dump(redact(report_json(report)), out, indent=2, default=str)
        out.write("\n")
    else:
        print(redact_text(report.render()), file=out)
        if args.json:
            write_json(args.json, report_json(report))
    return ExitStatus.SUCCESS
