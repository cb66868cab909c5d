"""``autotune export``: the verified winner as a ``vllm serve --config`` YAML, a command line, or LLM kwargs.

All three come from one translation, :meth:`autotune.core.records.EngineConfig.llm_kwargs`, which is also what the
engines ran, so the exported configuration is the measured one:

* ``vllm-yaml``: flat ``vllm serve`` long option names with dashes (``max-num-seqs: 4``), with
  ``compilation-config`` and ``speculative-config`` as maps and the model under ``model``;
* ``cli``: the equivalent ``vllm serve MODEL ...`` line, JSON-valued config options, shell-quoted;
* ``json``: keyword arguments for ``vllm.LLM(**kwargs)``.

The YAML and the command line start with comment lines recording the study, the measured throughput with its
interval, the baseline, the speedup and verdict, the engine version and the date. JSON has no comments, so the
same facts go to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from typing import IO, Any

import yaml

from autotune.cli._common import UsageError, add_store_args, open_named_study
from autotune.cli.preflight import check_output_path
from autotune.core.records import EngineConfig
from autotune.core.redact import REDACTED, redact, redact_text, redacted_fields
from autotune.report import Report, VerifiedRow, build_report
from autotune.core.exit_status import ExitStatus
from autotune.config.workload import unfit_for_serving

__all__ = [
    "FORMATS",
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

FORMATS = ("vllm-yaml", "cli", "json")
#: The two nested configs vLLM takes as JSON on its command line and as maps in a config file.
_JSON_OPTIONS = ("compilation_config", "speculative_config")


class NoResult(Exception):
    """The study has no verified winner to export; the message says how to get one."""


def winner_config(report: Report) -> EngineConfig:
    """The verified winner's configuration.

    Raises:
        NoResult: the study's verification has not finished.
    """
    if report.no_result:
        raise NoResult(f"study {report.study!r} has no measured winner to export: {report.no_result}")
    if report.winner is None:
        raise NoResult(f"study {report.study!r} has no finished verification, so there is no winner to export: run "
                       f"`autotune tune --study {report.study}` again (same space) to finish it")
    return report.winner.config


def to_llm_kwargs(report: Report) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM(**kwargs)``: the winner exactly as the engines ran it."""
    return winner_config(report).llm_kwargs()


def _option(name: str) -> str:
    return name.replace("_", "-")


def _config_file_entries(report: Report) -> dict[str, Any]:
    """``vllm serve --config`` entries: dashed long names, the model first, unset (``None``) values left out."""
    kwargs = to_llm_kwargs(report)
    entries: dict[str, Any] = {}
    if "model" in kwargs:
        entries["model"] = kwargs.pop("model")
    for key, value in kwargs.items():
        if value is not None:
            entries[_option(key)] = value
    return entries


def _fmt_tok_s(row: VerifiedRow | None) -> str:
    if row is None or row.mean is None:
        return "not measured"
    digits = 1 if row.unit == "tok/s" else 3
    text = f"{row.mean:.{digits}f} {row.unit} (n={row.n})"
    if row.ci_low is not None and row.ci_high is not None:
        text += f", 95% CI [{row.ci_low:.{digits}f}, {row.ci_high:.{digits}f}]"
    return text


def header_lines(report: Report, today: str | None = None) -> list[str]:
    """Provenance of the export, one fact per line (without comment markers)."""
    winner, engine = report.winner, report.meta.engine
    speedup = None if winner is None else winner.speedup
    if report.winner_is_baseline:
        verdict = "the baseline won: no configuration beat the engine defaults"
    elif speedup is not None:
        verdict = f"x{speedup.speedup:.2f}{speedup.interval_text()} - {report.verdict or speedup.verdict}"
    else:
        verdict = str(report.verdict or "unknown")
    from autotune import __version__

    workload = report.meta.workload
    levels = workload.get("concurrency")
    # What the value means when it is not plain output tok/s at one load: the limits, the levels and their rule.
    measured = ""
    if report.objective == "goodput":
        measured += " meeting " + ", ".join(f"{k} <= {v:g}" for k, v in sorted(report.slo.items()))
    if isinstance(levels, list) and len(levels) > 1:
        measured += f", {workload.get('aggregate')} over load levels {', '.join(map(str, levels))}"
    lines = [
        f"autotune study {report.study}: verified winner {None if winner is None else winner.label}",
        f"{'goodput' if report.objective == 'goodput' else 'throughput'}: {_fmt_tok_s(winner)}{measured} on "
        f"{engine.gpu or 'unknown GPU'}",
        f"baseline (engine defaults): {_fmt_tok_s(report.baseline)}",
        f"speedup over baseline: {verdict}",
        f"engine: {engine.name or 'unknown'} {engine.version or 'unknown'}; exported "
        f"{today or datetime.date.today().isoformat()} by autotune {__version__}",
    ]
    return lines


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)


def to_vllm_yaml(report: Report, today: str | None = None) -> str:
    """A config file for ``vllm serve --config FILE`` with a provenance header."""
    body = yaml.safe_dump(_config_file_entries(report), sort_keys=False, default_flow_style=False)
    usage = "use: vllm serve --config THIS_FILE"
    return _comment([*header_lines(report, today), usage]) + body


def _cli_tokens(key: str, value: Any) -> list[str]:
    flag = f"--{_option(key)}"
    if key in _JSON_OPTIONS or isinstance(value, dict):
        return [flag, json.dumps(value, separators=(", ", ": "))]
    if isinstance(value, bool):
        # vLLM's boolean options are --x / --no-x pairs.
        return [flag if value else f"--no-{_option(key)}"]
    if isinstance(value, (list, tuple)):
        return [flag, *(str(v) for v in value)]
    return [flag, str(value)]


def to_cli(report: Report, today: str | None = None) -> str:
    """The ``vllm serve MODEL ...`` command line, one option per line, shell-quoted, with the header."""
    kwargs = to_llm_kwargs(report)
    parts = ["vllm serve" + (f" {shlex.quote(str(kwargs.pop('model')))}" if "model" in kwargs else "")]
    for key, value in kwargs.items():
        if value is not None:
            parts.append(shlex.join(_cli_tokens(key, value)))
    return _comment(header_lines(report, today)) + " \\\n    ".join(parts) + "\n"


def render(report: Report, fmt: str, today: str | None = None) -> str:
    """The winner in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "vllm-yaml":
        return to_vllm_yaml(report, today)
    if fmt == "cli":
        return to_cli(report, today)
    if fmt == "json":
        return json.dumps(to_llm_kwargs(report), indent=2) + "\n"
    raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")


# -- the command -----------------------------------------------------------------------------------------


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune export``."""
    parser.add_argument("--study", help="study name (default: the most recent study in the store)")
    parser.add_argument("--format", choices=FORMATS, default="vllm-yaml",
                        help="vllm-yaml (for vllm serve --config), cli (a vllm serve line) or json "
                             "(LLM(**kwargs)); default: %(default)s")
    parser.add_argument("--out", metavar="PATH", help="write to PATH instead of stdout")
    parser.add_argument("--allow-test-settings", action="store_true",
                        help="export even when the winner carries settings fit for a test only (dummy weights, "
                             "synthetic acceptance, no tokenizer)")
    add_store_args(parser)


def run(args: argparse.Namespace, out: IO[str]) -> int:
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
        check_output_path(args.out, "--out")
    report = build_report(open_named_study(args))
    try:
        # An export is a file people share: the study stores no credential, and studies stored before that
        # was so lose theirs here.
        text = redact_text(render(report, args.format))
    except NoResult as exc:
        print(f"autotune: {exc}", file=sys.stderr)
        return ExitStatus.NO_RESULT
    test_only = unfit_for_serving(to_llm_kwargs(report))
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
    hidden = redacted_fields(redact(to_llm_kwargs(report)))
    if hidden:
        print(f"autotune: note: {', '.join(hidden)} held credentials and are written as {REDACTED}: fill them in "
              "(or pass them through the environment, e.g. HF_TOKEN) before serving", file=sys.stderr)
    if report.verdict != "faster":
        print(f"autotune: warning: the winner of {report.study!r} is no better than the baseline (verdict: "
              f"{report.verdict}); exporting it anyway - the engine defaults serve as well",
              file=sys.stderr)
    if args.format == "json":
        sys.stderr.write(_comment(header_lines(report)))
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
        hint = {"vllm-yaml": f"vllm serve --config {shlex.quote(args.out)}", "cli": f"sh {shlex.quote(args.out)}",
                "json": f"vllm.LLM(**json.load(open({args.out!r})))"}[args.format]
        print(f"autotune: wrote {args.out} ({hint})", file=sys.stderr)
    else:
        out.write(text)
    return ExitStatus.SUCCESS
