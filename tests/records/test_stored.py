"""Every stored record through the record layer, against what the hand-written methods it replaced wrote.

``golden/stored-records.json`` holds the records of tests/data/study-*.db (and a few of a ``make demo`` study with
its recheck, for the records those lack), each as stored and as the old ``to_dict(from_dict(stored))`` wrote it
back, captured before the methods were deleted: the layer must write the same bytes, key order included, so that
stored studies, their digests and the report JSON read back the same. ``golden/report-*`` are ``autotune report``'s
text and ``--json`` view of each stored study as printed before the record layer.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from autotune.cli._main import raw_main
from autotune.core.records import EngineConfig, RestartResult
from autotune.decisions.planning import RestartPlan
from autotune.decisions.recheck import RecheckRecord
from autotune.decisions.sequential import SequentialPlan
from autotune.decisions.verification import Candidate, Verification
from autotune.records import decode, encode
from autotune.stats.coldstart import ColdVerdict
from autotune.stats.intervals import TrialSummary
from autotune.stats.latency import LatencyStat, SloCheck
from autotune.store.fingerprint import Fingerprint
from autotune.store.ledger import StudyMeta
from autotune.store.search_end import SearchEnd

GOLDEN = Path(__file__).parent / "golden"
DATA = Path(__file__).parents[1] / "data"
TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    EngineConfig, RestartResult, TrialSummary, LatencyStat, SloCheck, ColdVerdict, Fingerprint, StudyMeta, SearchEnd,
    Candidate, Verification, RestartPlan, SequentialPlan, RecheckRecord)}
RECORDS = json.loads((GOLDEN / "stored-records.json").read_text())


def _rewrite(cls: type, shape: str, stored: Any) -> Any:
    def again(value: Any) -> Any:
        return encode(decode(cls, value))

    if shape == "one":
        return again(stored)
    if shape == "list":
        return [again(v) for v in stored]
    if shape == "map":
        return {k: again(v) for k, v in stored.items()}
    return {k: [again(v) for v in vs] for k, vs in stored.items()}  # a claim's restarts by config key


@pytest.mark.parametrize("stored", RECORDS, ids=[f"{r['db']}:{r['trial']}:{r['key']}" for r in RECORDS])
def test_a_stored_record_is_written_back_as_the_old_methods_wrote_it(stored: dict[str, Any]) -> None:
    written = stored["stored"] if stored["written"] == "same as stored" else stored["written"]
    again = _rewrite(TYPES[stored["type"]], stored["shape"], stored["stored"])
    assert json.dumps(again) == json.dumps(written)


STUDIES = ["study-2650b8d.db", "study-6d3c415.db", "study-recheck-h200-sim.db", "study_118f11c/optuna.db"]


@pytest.mark.parametrize("db", STUDIES)
def test_a_stored_study_reports_the_text_and_json_it_reported_before_the_record_layer(db: str, tmp_path: Path) -> None:
    shutil.copy(DATA / db, tmp_path / "o.db")
    name = "report-" + db.replace("/", "-").removesuffix(".db")
    text = io.StringIO()
    assert raw_main(["report", "--storage", f"sqlite:///{tmp_path}/o.db"], text) == 0
    assert text.getvalue() == (GOLDEN / f"{name}.txt").read_text()
    assert raw_main(["report", "--storage", f"sqlite:///{tmp_path}/o.db", "--json", str(tmp_path / "r.json")],
                    io.StringIO()) == 0
    view = json.loads((tmp_path / "r.json").read_text())
    view.pop("record")  # the typed Report as pydantic dumps it: read back by read_report, tested in tests/report/
    assert json.dumps(view, indent=1) == (GOLDEN / f"{name}.json").read_text()
