"""``autotune schema``: the JSON Schema of a space file, for an editor's YAML language server.

    autotune schema > space.schema.json

then put ``# yaml-language-server: $schema=./space.schema.json`` at the top of a space file (or map the schema to
``search_spaces/*.yaml`` in the editor's settings): unknown keys, wrong types and out-of-range values are marked
while the file is written. The schema comes from the models the loader validates with
(:mod:`autotune.config._models`), so the two cannot disagree on the shape; rules across fields (a range's ``high``
above its ``low``, a feasible space, the dataset's rows) are checked when the space is loaded.
"""

from __future__ import annotations

import argparse
import json
from typing import IO

from autotune.config.space import space_json_schema
from autotune.core.exit_status import ExitStatus

__all__ = ["configure_parser", "run"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune schema``."""
    parser.add_argument("--indent", type=int, default=2, help="JSON indentation (default: %(default)s)")


def run(args: argparse.Namespace, out: IO[str]) -> int:
    """Print the schema as JSON."""
    from autotune.cli.preflight import check_count

    # JSON's indentation is written on every line: a huge one is gigabytes of spaces (the count rule of every flag).
    check_count("--indent", args.indent, 0, 16, " spaces")
    out.write(json.dumps(space_json_schema(), indent=args.indent) + "\n")
    return ExitStatus.SUCCESS
