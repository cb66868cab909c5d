"""The typed report a finished (or running) study renders: built once from the ledger, rendered as text or JSON,
plotted, exported."""

from autotune.report._build import Report, VerifiedRow, build_report
from autotune.report._machine import kv_findings

__all__ = ["Report", "VerifiedRow", "build_report", "kv_findings"]
