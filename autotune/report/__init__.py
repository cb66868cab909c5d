"""The typed report a finished (or running) study renders: built once from the ledger, rendered as text or JSON
(a versioned document with a reader: ``report/_json.py``), plotted, exported."""

from autotune.report._build import build_report
from autotune.report._report import Report, VerifiedRow
from autotune.report._json import REPORT_FORMAT, ReportFormatError, read_report, report_from_json, report_json
from autotune.report._machine import kv_findings

__all__ = ["REPORT_FORMAT", "Report", "ReportFormatError", "VerifiedRow", "build_report", "kv_findings", "read_report",
           "report_from_json", "report_json"]
