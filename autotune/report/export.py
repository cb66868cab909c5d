"""The verified winner rendered as a ``vllm serve --config`` YAML, a command line, or LLM kwargs (pure rendering;
``autotune export`` in :mod:`autotune.cli.export` wires it to the command line).

All three come from one translation, :meth:`autotune.core.records.EngineConfig.llm_kwargs`, which is also what the
engines ran, so the exported configuration is the measured one:

* ``vllm-yaml``: flat ``vllm serve`` long option names with dashes (``max-num-seqs: 4``), with
  ``compilation-config`` and ``speculative-config`` as maps and the model under ``model``;
* ``cli``: the equivalent ``vllm serve MODEL ...`` line, JSON-valued config options, shell-quoted;
* ``json``: keyword arguments for ``vllm.LLM(**kwargs)``.

The YAML and the command line start with comment lines recording the study, the measured throughput with its
interval, the baseline, the speedup and verdict, the engine version and the date.

An export is run (``sh winner.sh``) or read by a server (``vllm serve --config``), and every string in it came from
a user: a space, a draft name, a study name, a GPU name. So nothing is templated into it as raw text: values go
through ``yaml.safe_dump``, ``shlex.quote`` or ``json.dumps``, and comment lines have every line break and control
character escaped, so that a name such as ``"ngram\\ntouch PWNED"`` stays inside its comment. Credentials are
removed from the values before rendering, never from the rendered text, where a replacement could cut across the
quoting.

A credential the space referenced (``hf_token: ${HF_TOKEN}``, :mod:`autotune.core.secrets`) is exported as that
reference, never its value: the command line double-quotes it (``--hf-token "${HF_TOKEN}"``), so the shell that
runs it fills it in from its own environment, with every other character single-quoted as before.
"""

from __future__ import annotations

import datetime
import json
import shlex
from typing import Any

import yaml

from autotune.core.records import EngineConfig
from autotune.core.redact import REFERENCE, has_reference, redact, redact_text
from autotune.core.schedule import SCHEDULE_SINCE, supports_schedule
from autotune.engines.vllm.vocabulary import Untranslatable, carry, recorded, version_tuple, vocabulary_for
from autotune.report._report import Report, VerifiedRow

__all__ = [
    "FORMATS",
    "NoResult",
    "Untranslatable",
    "export_config",
    "comment",
    "header_lines",
    "render",
    "to_cli",
    "to_json",
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
    config = report.winner.config
    if config.k_schedule is not None and supports_schedule(report.meta.engine.version) is False:
        raise NoResult(f"study {report.study!r}: the winner's K schedule ({config.k_schedule.text()}) needs vLLM >= "
                       f"{'.'.join(map(str, SCHEDULE_SINCE))}, but the study ran {report.meta.engine.name or 'the engine'}"
                       f" {report.meta.engine.version}: export refused")
    return config


def export_config(report: Report, vllm_version: str | None = None) -> EngineConfig:
    """The winner for vLLM ``vllm_version`` (``None``: the version the study ran): as the engines ran it, or
    translated into that version's names where the meaning is kept (:func:`autotune.engines.vllm.vocabulary.translate`,
    which also runs that version's own start-up checks on the result).

    Raises:
        NoResult: no verified winner.
        Untranslatable: the winner cannot mean the same on that version; the message says why.
    """
    config = winner_config(report)
    ran = report.meta.engine.version
    if vllm_version is None or (ran is not None and version_tuple(ran) == version_tuple(vllm_version)):
        return config
    if config.k_schedule is not None and supports_schedule(vllm_version) is False:
        raise Untranslatable(f"the winner's K schedule ({config.k_schedule.text()}) needs vLLM >= "
                             f"{'.'.join(map(str, SCHEDULE_SINCE))}")
    return carry(config, vocabulary_for(report.meta.engine), recorded(vllm_version))


def to_llm_kwargs(report: Report, vllm_version: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM(**kwargs)``: the winner exactly as the engines ran it (or translated for
    ``vllm_version``, :func:`export_config`)."""
    return export_config(report, vllm_version).llm_kwargs()


def _shareable_kwargs(report: Report, vllm_version: str | None = None) -> dict[str, Any]:
    """The winner's kwargs with credentials replaced, value by value (an export is a file people share)."""
    return redact(to_llm_kwargs(report, vllm_version))


def study_vocabulary_version(report: Report) -> str | None:
    """The vLLM version whose names the study's configurations are in (its engine's), ``None`` when unknown."""
    vocab = vocabulary_for(report.meta.engine)
    return None if vocab is None else vocab.version


def _option(name: str) -> str:
    return name.replace("_", "-")


def _config_file_entries(report: Report, vllm_version: str | None = None) -> dict[str, Any]:
    """``vllm serve --config`` entries: dashed long names, the model first, unset (``None``) values left out."""
    kwargs = _shareable_kwargs(report, vllm_version)
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


def header_lines(report: Report, today: str | None = None, vllm_version: str | None = None) -> list[str]:
    """Provenance of the export, one fact per line (without comment markers, not yet escaped)."""
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
    return [
        f"autotune study {report.study}: verified winner {None if winner is None else winner.label}",
        f"{'goodput' if report.objective == 'goodput' else 'throughput'}: {_fmt_tok_s(winner)}{measured} on "
        f"{engine.gpu or 'unknown GPU'}",
        f"baseline (engine defaults): {_fmt_tok_s(report.baseline)}",
        f"speedup over baseline: {verdict}",
        f"engine: {engine.name or 'unknown'} {engine.version or 'unknown'}; exported "
        f"{today or datetime.date.today().isoformat()} by autotune {__version__}",
        *([f"written for vLLM {vllm_version}: translated from the names of {engine.version or 'the study'}'s "
           "vLLM, not measured there (autotune recheck measures it)"]
          if vllm_version is not None and version_tuple(vllm_version) != version_tuple(engine.version) else []),
    ]


def _one_line(text: str) -> str:
    """``text`` with every character a shell or YAML could take as a line break (``\\n``, ``\\r``, ``\\x85``,
    ``\\u2028``...) or any other control character written as its escape, so it cannot leave a comment line."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def comment(lines: list[str]) -> str:
    """``lines`` as ``# ...`` comment lines, credentials removed and each line kept to exactly one line."""
    return "".join(f"# {_one_line(redact_text(line))}\n" for line in lines)


def to_vllm_yaml(report: Report, today: str | None = None, vllm_version: str | None = None) -> str:
    """A config file for ``vllm serve --config FILE`` with a provenance header."""
    body = yaml.safe_dump(_config_file_entries(report, vllm_version), sort_keys=False, default_flow_style=False)
    usage = "use: vllm serve --config THIS_FILE"
    return comment([*header_lines(report, today, vllm_version), usage]) + body


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


def _shell_word(text: str) -> str:
    """``text`` as one shell word: single-quoted, but for its ``${NAME}`` references, which are double-quoted so
    the shell expands them (the pieces are adjacent: the shell joins them into one word)."""
    if not has_reference(text):
        return shlex.quote(text)
    pieces, at = [], 0
    for m in REFERENCE.finditer(text):
        if m.start() > at:
            pieces.append(shlex.quote(text[at:m.start()]))
        pieces.append(f'"${{{m[1]}}}"')
        at = m.end()
    if at < len(text):
        pieces.append(shlex.quote(text[at:]))
    return "".join(pieces)


def to_cli(report: Report, today: str | None = None, vllm_version: str | None = None) -> str:
    """The ``vllm serve MODEL ...`` command line, one option per line, shell-quoted, with the header."""
    kwargs = _shareable_kwargs(report, vllm_version)
    parts = ["vllm serve" + (f" {_shell_word(str(kwargs.pop('model')))}" if "model" in kwargs else "")]
    for key, value in kwargs.items():
        if value is not None:
            parts.append(" ".join(map(_shell_word, _cli_tokens(key, value))))
    return comment(header_lines(report, today, vllm_version)) + " \\\n    ".join(parts) + "\n"


def to_json(report: Report, vllm_version: str | None = None) -> str:
    """Keyword arguments for ``vllm.LLM(**kwargs)`` as JSON (no comments: the caller shows the header apart)."""
    return json.dumps(_shareable_kwargs(report, vllm_version), indent=2) + "\n"


def render(report: Report, fmt: str, today: str | None = None, vllm_version: str | None = None) -> str:
    """The winner in ``fmt`` (one of :data:`FORMATS`).

    Raises:
        NoResult: the study has no verified winner.
        Untranslatable: the winner cannot mean the same on ``vllm_version``.
        ValueError: an unknown format.
    """
    if fmt == "vllm-yaml":
        return to_vllm_yaml(report, today, vllm_version)
    if fmt == "cli":
        return to_cli(report, today, vllm_version)
    if fmt == "json":
        return to_json(report, vllm_version)
    raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
