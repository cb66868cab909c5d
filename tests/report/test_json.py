"""``--json`` is a versioned document with a reader, and the text report renders from it (issue 32, principle 8).

One real sim study (``tune --engine sim --json``) is written once; the tests read it back, and break copies of it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.cli._common import write_json
from autotune.cli._main import raw_main
from autotune.core.exit_status import ExitStatus
from autotune.report import REPORT_FORMAT, ReportFormatError, build_report, read_report, report_json
from autotune.store import ledger


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("report-json")
    out = io.StringIO()
    storage = f"sqlite:///{tmp}/o.db"
    status = raw_main(["tune", "--space", "search_spaces/gb10.yaml", "--engine", "sim", "--study", "rt", "--trials",
                       "6", "--storage", storage, "--workdir", str(tmp / "work"), "--no-mlflow",
                       "--json", str(tmp / "report.json"), "--quiet"], out=out)
    assert status == ExitStatus.SUCCESS
    return {"tmp": tmp, "storage": storage, "path": tmp / "report.json", "printed": out.getvalue()}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[ExitStatus, str, str]:
    out = io.StringIO()
    status = raw_main(argv, out=out)
    return status, out.getvalue(), capsys.readouterr().err


def _refused(path: Path, *names: str) -> str:
    """The one line read_report refuses ``path`` with; it names the file and each of ``names``."""
    with pytest.raises(ReportFormatError) as caught:
        read_report(path)
    line = str(caught.value)
    assert isinstance(caught.value, ValueError) and "\n" not in line and line.startswith(f"{path}: "), line
    for name in names:
        assert name in line, (name, line)
    return line


def _variant(written: dict[str, Any], name: str, change) -> Path:
    data = json.loads(written["path"].read_text())
    change(data)
    path = written["tmp"] / name
    path.write_text(json.dumps(data))
    return path


def test_the_text_report_renders_from_the_json_tune_wrote(written, capsys):
    # Only tune's report has the simulator's ground truth (it has the engine): reading it back is the only way
    # `report --from-json` can print it.
    assert "Simulator ground truth" in written["printed"]
    status, printed, err = _run(["report", "--from-json", str(written["path"])], capsys)
    assert status == ExitStatus.SUCCESS and err == ""
    assert printed == written["printed"]


def test_a_built_report_renders_the_same_after_a_round_trip_through_its_file(written):
    report = build_report(ledger.load("rt", written["storage"]))
    path = written["tmp"] / "again.json"
    write_json(str(path), report_json(report))  # what every --json writes: redacted, indented
    text = path.read_text()
    back = read_report(path)
    assert back.render() == report.render()
    # The document: the version first, every key the flat view had (names unchanged), then the typed record;
    # strict JSON (no bare NaN), and the view is what the record gives back.
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in a report JSON"))
    assert list(data) == ["format", *report.to_json(), "record"] and data["format"] == REPORT_FORMAT
    assert {k: v for k, v in data.items() if k not in ("format", "record")} == json.loads(
        json.dumps(back.to_json(), default=str))


def test_an_unknown_or_newer_format_is_one_line_naming_it(written):
    newer = _variant(written, "newer.json", lambda d: d.update(format="autotune.report/2"))
    assert "newer than" in _refused(newer, "format", "autotune.report/2", REPORT_FORMAT)
    other = _variant(written, "other.json", lambda d: d.update(format="pyperf/1.0"))
    assert "not an autotune report format" in _refused(other, "format", "'pyperf/1.0'")
    # A report JSON from before the format was versioned (no key): it says so, and how to write it again.
    old = _variant(written, "old.json", lambda d: d.pop("format"))
    _refused(old, "format: missing", "--json")


def test_a_truncated_or_malformed_file_is_one_line_naming_the_place(written):
    truncated = written["tmp"] / "truncated.json"
    text = written["path"].read_text()
    truncated.write_text(text[:len(text) // 2])
    _refused(truncated, "not valid JSON at line")
    bad_field = _variant(written, "bad-field.json", lambda d: d["record"]["budget"].update(restarts_used="many"))
    _refused(bad_field, "record.budget.restarts_used")
    no_record = _variant(written, "no-record.json", lambda d: d.pop("record"))
    _refused(no_record, "record: missing")
    not_object = written["tmp"] / "list.json"
    not_object.write_text("[1, 2]")
    _refused(not_object, "list")


def test_a_directory_a_binary_or_a_missing_file_is_one_line(written):
    assert "is a directory" in _refused(written["tmp"])
    binary = written["tmp"] / "binary.json"
    binary.write_bytes(b'{"format": "\xff\xfe"}')
    _refused(binary, "not UTF-8")
    _refused(written["tmp"] / "absent.json", "no such file")


def test_the_cli_refuses_a_bad_file_in_one_line_with_exit_2(written, capsys):
    bad = written["tmp"] / "bad.json"
    bad.write_text('{"format": "autotune.report/9"')
    status, printed, err = _run(["report", "--from-json", str(bad)], capsys)
    assert status == ExitStatus.BAD_INPUT and printed == ""
    assert err.count("\n") == 1 and err.startswith(f"autotune: error: {bad}: not valid JSON")
    status, _, err = _run(["report", "--from-json", str(written["path"]), "--study", "rt"], capsys)
    assert status == ExitStatus.BAD_INPUT and err.count("\n") == 1 and "drop --study" in err
