"""A cmd engine for the fault-injection test: the example engine plus a long-lived helper process.

Real engines start helpers (vLLM's engine core, tokenizer workers) in their own process group; a restart that is
cut short must not leave them running. This wrapper starts ``sleep`` in its process group for each restart and
leaves it to the caller to stop the group, as autotune's cmd engine does after every restart.

Usage (as a ``cmd`` engine command): ``python tests/fault_engine.py SECONDS [example engine args...]``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    linger_s = sys.argv[1]
    subprocess.Popen(["sleep", linger_s], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    from examples.cmd_engine_example import main

    sys.exit(main())
