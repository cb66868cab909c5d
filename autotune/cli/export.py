"""``autotune export``: the command that writes the verified winner as a ``vllm serve --config`` YAML, a command
line, or LLM kwargs. The rendering itself (and why every user string in it is quoted or escaped) is
:mod:`autotune.report.export`; this module picks the study, refuses what should not be exported and writes the file.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import IO

from autotune.cli._common import UsageError, add_store_args, open_named_study, open_output
from autotune.cli.preflight import check_output_path, dataset_path, protected_paths
from autotune.core.redact import REDACTED, redact, redacted_fields
from autotune.core.secrets import references
from autotune.engines.vllm.vocabulary import version_tuple
from autotune.report import build_report
from autotune.report.export import (FORMATS, NoResult, Untranslatable, comment, header_lines, render, to_cli,
                                    to_llm_kwargs, to_vllm_yaml, winner_config)
from autotune.core.exit_status import ExitStatus
from autotune.core.urls import StorageUrl
from autotune.config.workload import unfit_for_serving
from autotune.observers.mlflow import resolve_tracking_uri

__all__ = [
    "FORMATS",
    "HELP",
    "NoResult",
    "configure_parser",
    "header_lines",
    "render",
    "run",
    "to_cli",
    "to_llm_kwargs",
    "to_vllm_yaml",
    "winner_config",
]

HELP = "Export the verified winner as a vllm serve YAML, CLI flags or LLM kwargs."


# -- the command -----------------------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune export``."""
    parser.add_argument("--study", help="study name (default: the most recent study in the store)")
    parser.add_argument("--format", choices=FORMATS, default="vllm-yaml",
                        help="vllm-yaml (for vllm serve --config), cli (a vllm serve line) or json "
                             "(LLM(**kwargs)); default: %(default)s")
    parser.add_argument("--out", metavar="PATH", help="write to PATH instead of stdout")
    parser.add_argument("--vllm-version", metavar="VERSION",
                        help="write the winner in this vLLM's names (e.g. 0.34.0: decode graphs in requests); "
                             "translated where the meaning is kept, refused with the reason where not "
                             "(default: the version the study ran)")
    parser.add_argument("--allow-test-settings", action="store_true",
                        help="export even when the winner carries settings fit for a test only (dummy weights, "
                             "synthetic acceptance, no tokenizer)")
    add_store_args(parser)


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Export the study's verified winner.

    Returns:
        ``SUCCESS``; ``NO_RESULT`` when the study has no finished verification; ``BAD_INPUT`` when the winner
        carries test-only settings (dummy weights, synthetic acceptance, no tokenizer) without
        ``--allow-test-settings``.

    Raises:
        UsageError: a bad ``--out`` name.
        autotune.store.ledger.LedgerError: unknown study (the message lists the studies there are).
    """
    if args.out and args.format == "vllm-yaml" and not args.out.endswith((".yaml", ".yml")):
        raise UsageError(f"--out {args.out}: vllm serve --config only reads .yaml/.yml files; "
                         "name it e.g. winner.yaml")
    if args.out:
        check_output_path(args.out, "--out", links=False)
    version = args.vllm_version
    if version is not None and version_tuple(version) is None:
        raise UsageError(f"--vllm-version {version!r} is not a version: write e.g. --vllm-version 0.34.0")
    study = open_named_study(args)
    if args.out:
        meta = study.meta()
        check_output_path(args.out, "--out", protected_paths(
            storage=StorageUrl.parse(args.storage), tracking_uri=resolve_tracking_uri(), space_file=meta.space_file,
            dataset=dataset_path(meta.workload)))
    report = build_report(study)
    try:
        # Credentials are removed value by value inside render (studies stored before the study kept none).
        text = render(report, args.format, vllm_version=version)
    except NoResult as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return ExitStatus.NO_RESULT
    except Untranslatable as exc:
        print(f"autotune: error: --vllm-version {version}: the winner of {report.study!r} (found on "
              f"{report.meta.engine.name or 'the engine'} {report.meta.engine.version or '?'}) cannot be exported "
              f"with the same meaning: {exc}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    test_only = unfit_for_serving(to_llm_kwargs(report, version))
    if test_only and not args.allow_test_settings:
        print(f"autotune: error: the winner of {report.study!r} carries settings fit for a test only: "
              f"{'; '.join(test_only)}; a server started from this export would not serve your model as measured "
              "- re-run the study without them, or pass --allow-test-settings to export anyway", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    if test_only:
        print(f"autotune: warning: exporting test-only settings: {'; '.join(test_only)}", file=sys.stderr)
    if report.slo_outcome is not None and not report.slo_outcome.winner_meets:
        print(f"autotune: warning: no verified configuration of {report.study!r} met the latency limits "
              f"{dict(report.slo)}; the exported configuration misses them too", file=sys.stderr)
    referenced = references(to_llm_kwargs(report, version))
    if referenced:
        names = ", ".join(f"${{{name}}}" for name in referenced)
        print(f"autotune: note: the export holds the references {names} as the study's space wrote them, never "
              "their values: the cli format's shell fills them in from its environment; substitute them in a "
              "vllm-yaml or json export before use (e.g. envsubst)", file=sys.stderr)
    hidden = redacted_fields(redact(to_llm_kwargs(report, version)))
    if hidden:
        print(f"autotune: note: {', '.join(hidden)} held credentials and are written as {REDACTED}: fill them in "
              "(or pass them through the environment, e.g. HF_TOKEN) before serving", file=sys.stderr)
    if report.verdict != "faster":
        print(f"autotune: warning: the winner of {report.study!r} is no better than the baseline (verdict: "
              f"{report.verdict}); exporting it anyway - the engine defaults serve as well",
              file=sys.stderr)
    if args.format == "json":
        sys.stderr.write(comment(header_lines(report, vllm_version=version)))
    if args.out:
        with open_output(args.out, "--out") as fh:
            fh.write(text)
        hint = {"vllm-yaml": f"vllm serve --config {shlex.quote(args.out)}", "cli": f"sh {shlex.quote(args.out)}",
                "json": f"vllm.LLM(**json.load(open({args.out!r})))"}[args.format]
        print(f"autotune: wrote {args.out} ({hint})", file=sys.stderr)
    else:
        out.write(text)
    return ExitStatus.SUCCESS
