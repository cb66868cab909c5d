"""The typed report a finished (or running) study renders: built once from the ledger, rendered as text or JSON,
plotted, exported."""

from autotune.report._build import Report, VerifiedRow, build_report

__all__ = ["Report", "VerifiedRow", "build_report"]
