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

from autotune.records import encode
from autotune.config.space import space_json_schema
from autotune.core.exit_status import ExitStatus

__all__ = ["HELP", "configure_parser", "run"]

HELP = "Print the JSON Schema of a space file, for editors."


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Options of ``autotune schema``."""
    parser.add_argument("--indent", type=int, default=2, help="JSON indentation (default: %(default)s)")
    parser.add_argument("--vllm-version", metavar="VERSION",
                        help="add what that vLLM accepts (x-vllm-vocabulary: its capture unit, speculative methods "
                             "and options, from the table recorded for it; `doctor` asks the installed vLLM itself)")


def run(args: argparse.Namespace, out: IO[str]) -> ExitStatus:
    """Print the schema as JSON."""
    from autotune.cli.preflight import check_count

    # JSON's indentation is written on every line: a huge one is gigabytes of spaces (the count rule of every flag).
    check_count("--indent", args.indent, 0, 16, " spaces")
    schema = space_json_schema()
    if args.vllm_version is not None:
        from autotune.cli._common import UsageError
        from autotune.engines.vllm.vocabulary import recorded, version_tuple

        if version_tuple(args.vllm_version) is None:
            raise UsageError(f"--vllm-version {args.vllm_version!r} is not a version: write e.g. --vllm-version 0.34.0")
        vocab = recorded(args.vllm_version)
        # An editor shows the description; tools read the object (the capture unit decides which key to search).
        schema["x-vllm-vocabulary"] = encode(vocab)
        schema["description"] = f"{schema.get('description', '')} For {'; '.join(vocab.lines())}".strip()
    out.write(json.dumps(schema, indent=args.indent) + "\n")
    return ExitStatus.SUCCESS
