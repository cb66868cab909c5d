"""``autotune bench``: the tuner against other strategies on the simulator's ground truth.

The benchmark itself lives in :mod:`autotune.bench`; this module is its entry in the command's registry.
"""

from __future__ import annotations

from autotune.bench._bench import configure_parser, run

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Benchmark the tuner against other strategies on simulated ground truth."
