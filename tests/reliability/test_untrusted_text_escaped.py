"""Issue 44, principle 4: untrusted strings are escaped on output. Labels, study names, engine lines and stored
reports are other people's text; one function (``core/escape.escape_text``) escapes them at every output boundary:
the terminal (stdout and stderr of every command, the progress lines), MLflow (run names, params, tags, text
artifacts) and plots (docs/reliability.md, "Round five", "4. Output escaping")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from autotune.core.exit_status import ExitStatus
from tests._helpers.cli import run_cli, tune_argv

#: What a forged label holds: clear the screen, colour, set the window title, a C1 CSI, a right-to-left override.
FORGED = "\x1b[2J\x1b[31mx1.99 WINNER\x1b]0;pwned\x07\x9b1m\u202e"
#: Bytes a terminal acts on: none may reach it.
_ACTIVE = ("\x1b", "\x07", "\x9b", "\u202e")

REPO = Path(__file__).resolve().parents[2]


def _clean(text: str) -> bool:
    return not any(ch in text for ch in _ACTIVE)


def test_escape_text_keeps_lines_and_makes_every_control_visible():
    from autotune.core.escape import escape_text

    assert escape_text("a\tb\nc") == "a\tb\nc"
    shown = escape_text(FORGED + "\rover")
    assert _clean(shown) and "\r" not in shown
    assert "\\x1b[2J" in shown and "\\u202e" in shown and "\\x9b" in shown and "\\x0d" in shown
    assert escape_text(shown) == shown  # escaping twice changes nothing: layers may each escape


def test_report_from_json_with_forged_labels_writes_no_escape_to_the_terminal(tmp_path, capsys, stored_study):
    """The issue's case: ``report --from-json`` of a report whose labels hold escape sequences wrote them raw."""
    status, out, err = run_cli(["report", "--storage", f"sqlite:///{stored_study}/optuna.db", "--study", "one",
                             "--json", str(tmp_path / "r.json")], capsys)
    assert status == ExitStatus.SUCCESS, err
    text = (tmp_path / "r.json").read_text()
    forged = text.replace("default-mode", json.dumps(FORGED)[1:-1] + "default-mode")
    assert forged != text
    (tmp_path / "forged.json").write_text(forged)
    status, out, err = run_cli(["report", "--from-json", str(tmp_path / "forged.json")], capsys)
    assert status == ExitStatus.SUCCESS, err
    assert _clean(out) and _clean(err), "an escape sequence from the file reached the terminal"
    assert "\\x1b[2J\\x1b[31mx1.99 WINNER" in out, "the forged text is shown, visibly"


def test_an_engine_error_line_is_escaped_in_the_progress_and_the_report(tmp_path, capsys):
    """A cmd engine whose failure reason holds escape sequences: the progress line on stderr and the report on
    stdout show them escaped."""
    wrapper = tmp_path / "engine.py"
    wrapper.write_text("import json, sys\nsys.stdin.read()\n"
                       f"print(json.dumps({{'status': 'failed', 'error': {FORGED!r} + ' boom'}}))\n")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "name": "forged", "engine": {"name": "cmd", "cmd": {"command": [sys.executable, str(wrapper)]}},
        "engine_args": {"model": "m"},
        "workload": {"num_prompts": 8, "input_len": 64, "output_len": 64, "concurrency": 4, "timed_passes": 2},
        "search": {"cudagraph_mode": ["NONE"]},
    }, sort_keys=False))
    argv = [a for a in tune_argv(tmp_path, space) if a not in ("--quiet",)]
    argv[argv.index("--engine") + 1] = "cmd"
    status, out, err = run_cli(argv, capsys)
    assert "boom" in err + out, err[-2000:]
    assert _clean(out) and _clean(err), "an engine's escape sequence reached the terminal"


def test_mlflow_run_names_params_tags_and_text_are_escaped(tmp_path):
    from autotune.observers.mlflow._session import _Session

    session = _Session(f"sqlite:///{tmp_path}/mlflow.db")
    exp = session.experiment_id("autotune/forged")
    parent = session.client.create_run(exp).info.run_id
    run_id = session.child_run(exp, parent, f"trial {FORGED}", {"label": FORGED})
    session.log(run_id, params={"label": FORGED}, tags={"reason": FORGED})
    session.log_text(run_id, f"report\n{FORGED}\n", "report.txt")
    run = session.client.get_run(run_id)
    stored = [run.info.run_name, run.data.params["label"], run.data.tags["label"], run.data.tags["reason"],
              Path(session.client.download_artifacts(run_id, "report.txt", str(tmp_path))).read_text()]
    assert all(_clean(value) for value in stored), stored
    assert all("x1.99 WINNER" in value for value in stored)


def test_a_plot_label_with_terminal_escapes_or_mathtext_is_drawn_as_text(tmp_path, stored_study):
    """A label holding ``$\\frac{`` made matplotlib's mathtext fail the whole plot; escapes went into the image.
    The plot is drawn, its texts escaped and taken literally."""
    from autotune.report import read_report
    from autotune.report.plots import winner_vs_baseline

    status = run_cli(["report", "--storage", f"sqlite:///{stored_study}/optuna.db", "--study", "one", "--json",
                   str(tmp_path / "r.json")], _NoCapsys())[0]
    assert status == ExitStatus.SUCCESS
    text = (tmp_path / "r.json").read_text()
    (tmp_path / "forged.json").write_text(text.replace("default-mode", json.dumps(FORGED + "$\\frac{")[1:-1]
                                                       + "default-mode"))
    report = read_report(tmp_path / "forged.json")
    fig = winner_vs_baseline(report)
    fig.savefig(tmp_path / "plot.png")  # mathtext is parsed when drawn: this raised before
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels and all(_clean(label) for label in labels) and any("\\$\\frac{" in label for label in labels)


class _NoCapsys:
    """``run_cli`` reads stderr from capsys; here only the status is wanted."""

    @staticmethod
    def readouterr() -> object:
        return type("Captured", (), {"err": ""})()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_every_command_line_passes_the_escaping_stream(stream, capsys, monkeypatch):
    """The boundary itself: whatever a command prints, on either stream, reaches the terminal escaped."""
    import autotune.cli.schema as schema

    def forged(args, out):
        print(f"label {FORGED}", file=out if stream == "stdout" else sys.stderr)
        return ExitStatus.SUCCESS

    monkeypatch.setattr(schema, "run", forged)
    from autotune.cli import _main

    monkeypatch.setattr(_main, "SUBCOMMANDS", tuple(
        _main.Subcommand(c.name, c.help, c.configure, forged if c.name == "schema" else c.run)
        for c in _main.SUBCOMMANDS))
    status, out, err = run_cli(["schema"], capsys)
    assert status == ExitStatus.SUCCESS
    assert _clean(out) and _clean(err) and "label \\x1b[2J" in out + err
