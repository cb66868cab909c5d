"""``autotune bench-scaling``: 1, 2, 4 and 8 workers on one study at one start budget, on simulated time.

The benchmark itself lives in :mod:`autotune.bench.scaling`; this module is its entry in the command's registry.
"""

from __future__ import annotations

from autotune.bench.scaling import configure_parser, run

__all__ = ["HELP", "configure_parser", "run"]

HELP = "1, 2, 4 and 8 workers on one study at one start budget, on simulated time."
