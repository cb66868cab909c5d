"""What every subcommand shares: usage errors, ``KEY=VALUE`` flags, the store, the space, the engine, a study.

Subcommand modules import these from here, never from :mod:`autotune.cli._main`, which imports them.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from typing import Any

from autotune.store.ledger import DEFAULT_STORAGE, Ledger, latest_study_name, load
from autotune.cli.gpu_workers import STORAGE_ENV
from autotune.cli.preflight import check_storage
from autotune.store.studydir import MAX_NAME_BYTES

__all__ = [
    "UsageError",
    "add_store_args",
    "build_engine",
    "default_study_name",
    "load_space_for",
    "open_named_study",
    "parse_kv",
]


class UsageError(Exception):
    """Bad command-line input; the message names the flag and the fix."""


def parse_kv(items: Sequence[str] | None, flag: str) -> dict[str, Any]:
    """``["k=v", ...]`` -> dict, values parsed as YAML scalars/lists (``sizes=[1,2,4]``, ``K=3``)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} num_speculative_tokens=3")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def default_study_name(space: Any, engine: str) -> str:
    model = str(space.engine_args.get("model", "model")).rstrip("/")
    base = f"{space.name}-{engine}-{os.path.basename(model) or model}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or "study"
    return name[:MAX_NAME_BYTES]  # a long model path must not make a name the file system refuses


def add_store_args(parser: argparse.ArgumentParser) -> None:
    # The help never shows the environment's URL: it may hold a password.
    parser.add_argument("--storage", default=os.environ.get(STORAGE_ENV, DEFAULT_STORAGE),
                        help=f"Optuna storage URL (default: ${STORAGE_ENV}, else {DEFAULT_STORAGE}, which several "
                             "workers on one machine share; postgresql+psycopg2://user@host/db for several "
                             "machines, the password in ~/.pgpass or the URL, never printed or stored)")


def add_output_args(parser: argparse.ArgumentParser, tracking_note: str = "") -> None:
    """Where a study's results go (MLflow, a JSON report) and how much is printed: ``tune`` and ``worker``."""
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI "
                        f"or sqlite:///mlruns/mlflow.db{tracking_note})")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--quiet", action="store_true", help="only the progress bar and the final report")


def load_space_for(args: argparse.Namespace) -> Any:
    from autotune.config.space import load_space

    space = load_space(args.space)
    if getattr(args, "model", None):
        space = space.with_model(args.model)
    return space


def build_engine(space: Any, name: str | None, options: dict[str, Any], cache_dir: str | None = None) -> Any:
    """The engine named on the command line, else the space's ``engine.name``, else ``vllm``.

    Engine options come from the space's ``engine:`` section: ``engine.<name>: {...}`` per engine, or flat
    keys for the space's own engine; ``--engine-opt`` overrides both.
    """
    from autotune.engines import ENGINES, make_engine

    section = dict(space.engine)
    space_engine = section.pop("name", None)
    per_engine = {k: section.pop(k) for k in list(section) if k in ENGINES and isinstance(section[k], dict)}
    chosen = name or space_engine or "vllm"
    if chosen not in ENGINES:
        raise UsageError(f"--engine {chosen!r} is not an engine: choose one of {', '.join(sorted(ENGINES))}")
    engine_opts = dict(per_engine.get(chosen, {}))
    if chosen == space_engine:
        engine_opts = {**section, **engine_opts}  # flat options belong to the space's own engine
    engine_opts.update(options)
    engine = make_engine(chosen, cache_dir=cache_dir, **engine_opts)
    engine.check(space)
    return engine


def open_named_study(args: argparse.Namespace) -> Ledger:
    """The ledger of the study ``--study`` names in ``--storage`` (the latest one without ``--study``).

    The store is checked first (:func:`autotune.cli.preflight.check_storage`): a bad URL, a missing or corrupt
    database is one line, and reading never creates a store.
    """
    check_storage(args.storage, write=False)
    return load(args.study or latest_study_name(args.storage), args.storage)
