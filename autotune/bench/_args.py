"""The benchmarks' command lines, read at one boundary (issue 44): every flag typed and bounded where it is parsed.

``python -m autotune.bench.<name>`` (and ``make bench-*``) took ``--draws 0`` (a ZeroDivisionError), ``--budgets
nan`` and ``--seed -1`` (numpy's ValueError) as given. Each flag now names its type here, and a refused value is
one line naming the flag and the range, exit status 2, as ``autotune``'s own flags are.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = ["BenchParser", "count", "fail", "number", "seed_number"]

#: numpy's and Optuna's seeds are 32-bit.
MAX_SEED = 2**32 - 1


class BenchParser(argparse.ArgumentParser):
    """argparse, with its refusal on one line (the usage block would bury it), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def fail(prog: str, message: str) -> NoReturn:
    """One line naming the input and the fix, exit status 2: an input the flags could not check alone (a scenario
    that is not recorded, a replay database that cannot be read)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def count(low: int = 1, high: int = 10_000_000) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high`` (draws, seeds a cell, jobs, a budget of starts)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    parse.__name__ = "count"
    return parse


def number(low: float, high: float, *, above: bool = False) -> Callable[[str], float]:
    """A finite number from ``low`` (excluded when ``above``) to ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value > high or value < low or (above and value == low):
            side = f"above {low:g}" if above else f"from {low:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {side} to {high:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


#: A seed: a whole number numpy takes.
seed_number = count(0, MAX_SEED)
