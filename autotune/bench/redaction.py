"""How long redaction takes on one long line: it must grow linearly with the line (issue 22, CMD07/CMD08).

A cmd engine's wrapper may write one line of megabytes to stderr; autotune redacts it before it stores or prints
any of it. A pattern that retries a long run of name characters at every position made that quadratic (20k
characters took 4.6 s, 40k took 26 s), so a 5 MB line held a core at 100% until the engine's timeout.

``python -m autotune.bench.redaction`` times :func:`autotune.core.redact.redact_text` on lines of 10k, 100k, 1M
and 10M characters for a few line shapes (the runs that used to be slow, and a log line dense with pairs), prints
the CPU seconds per MB side by side (flat across sizes when linear) and exits 1 when a 10M-character line of any shape
takes more than ``--bound`` CPU seconds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from autotune.bench._args import BenchParser, number
from autotune.core.redact import redact_text

__all__ = ["SHAPES", "SIZES", "main", "time_redaction"]

#: Line lengths timed, in characters.
SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
#: One repeated unit per line shape: each made the old patterns retry a long run at every character.
SHAPES = {
    "one word": "x",
    "dashed words": "-a",
    "dotted words": "a.",
    "quoted words": '"a',
    "url-like": "http://a",
    "pairs (log)": "max_num_seqs=8 hf_token=hf_QwErTyUiOpAsDfGhJkLzXc --api-key k, ",
}
#: A 10M-character line of any shape redacted in more than this many seconds fails the benchmark.
DEFAULT_BOUND_S = 5.0


def time_redaction(unit: str, size: int) -> float:
    """CPU seconds :func:`redact_text` takes on one line of ``size`` characters made of ``unit`` repeated.

    CPU time rather than wall time: on a shared machine the wall clock also counts other processes' turns.
    """
    line = (unit * (size // len(unit) + 1))[:size]
    started = time.process_time()
    redact_text(line)
    return time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(prog="python -m autotune.bench.redaction", description=__doc__.split("\n")[0])
    parser.add_argument("--bound", type=number(0, 3600, above=True), default=DEFAULT_BOUND_S,
                        help=f"seconds a 10M-character line may take (default {DEFAULT_BOUND_S:g})")
    args = parser.parse_args(argv)
    header = "".join(f"{size / 1e6:>10g}M" for size in SIZES)
    print(f"redact_text: CPU seconds per MB of one line, by line length (flat = linear)\n{'shape':<14}{header}"
          f"{'10M line':>11}")
    slow = []
    for name, unit in SHAPES.items():
        seconds = [time_redaction(unit, size) for size in SIZES]
        per_mb = "".join(f"{s / (size / 1e6):>11.3f}" for s, size in zip(seconds, SIZES))
        print(f"{name:<14}{per_mb}{seconds[-1]:>10.2f}s")
        if seconds[-1] > args.bound:
            slow.append(f"{name} ({seconds[-1]:.1f} s)")
    if slow:
        print(f"FAIL: a 10M-character line took more than {args.bound:g} s: {', '.join(slow)}")
        return 1
    print(f"PASS: every 10M-character line took at most {args.bound:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
