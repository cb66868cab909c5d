"""What every subcommand shares: usage errors, ``KEY=VALUE`` flags, the store, the space, the engine, a study,
the command line as recorded, JSON files.

Subcommand modules import these from here, never from :mod:`autotune.cli._main`, which imports them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from autotune.cli.gpu_workers import STORAGE_ENV
from autotune.store.health import check_storage
from autotune.core.redact import redact, redact_command
from autotune.core.secrets import literal_secret, unresolvable
from autotune.store.ledger import DEFAULT_STORAGE, DEFAULT_WORKDIR, Ledger, latest_study_name, load
from autotune.store.studydir import MAX_NAME_BYTES

if TYPE_CHECKING:
    from pathlib import Path

    from autotune.config.space import SearchSpace
    from autotune.core.params import RawParams
    from autotune.engines import EngineBackend, RawOptions

__all__ = [
    "PARAM_ALIASES",
    "EngineChoice",
    "StudyOutput",
    "UsageError",
    "add_output_args",
    "add_store_args",
    "add_workdir_arg",
    "build_engine",
    "check_engine_name",
    "canonical_params",
    "command_line",
    "default_study_name",
    "load_space_for",
    "open_output",
    "check_engine_sections",
    "check_references",
    "make_engine_from_input",
    "open_named_study",
    "parse_kv",
    "parse_params",
    "write_json",
]

#: Short names for a trial's parameters, accepted wherever a configuration is typed (``--params``, ``--enqueue``).
PARAM_ALIASES = {"K": "num_speculative_tokens", "k": "num_speculative_tokens", "sizes": "capture_sizes",
                 "mode": "cudagraph_mode"}


class UsageError(Exception):
    """Bad command-line input; the message names the flag and the fix."""


def parse_kv(items: Sequence[str] | None, flag: str) -> dict[str, object]:
    """``["k=v", ...]`` -> dict, values parsed as YAML scalars/lists (``sizes=[1,2,4]``, ``K=3``)."""
    from autotune.config import MAX_NUMBER, load_yaml

    out: dict[str, object] = {}
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} num_speculative_tokens=3")
        key, value = item.split("=", 1)
        # The space file's YAML reading (aliases bounded) and its rule for numbers: finite and plausible.
        parsed = load_yaml(value, lambda _where, problem, fix: UsageError(f"{flag} {item!r}: {problem}; {fix}"))
        for number in _numbers(parsed):
            if not math.isfinite(number) or abs(number) > MAX_NUMBER:
                raise UsageError(f"{flag} {item!r}: {number!r} is not a finite, plausible number; give a number "
                                 f"within ±{MAX_NUMBER:.0e}")
        # A credential typed on the command line is a reference too (``api_key=${API_KEY}``): the study stores
        # what is typed, and could not give a literal back (autotune.core.secrets).
        literal = literal_secret(parsed, key.strip(), key.strip())
        if literal is not None:
            raise UsageError(f"{flag} {literal[0]} {literal[1]}; fix: {literal[2]}")
        out[key.strip()] = parsed
    return out


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)] if not isinstance(value, int) or abs(value) < 10**300 else [math.inf]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [n for item in items for n in _numbers(item)]


def canonical_params(params: RawParams) -> dict[str, object]:
    """Trial parameters under their full names (:data:`PARAM_ALIASES`: ``K=3`` is ``num_speculative_tokens=3``)."""
    return {PARAM_ALIASES.get(str(k), str(k)): v for k, v in params.items()}


def parse_params(items: Sequence[str] | None, flag: str) -> dict[str, object]:
    """A configuration typed as ``KEY=VALUE`` items (:func:`parse_kv`), aliases resolved (:func:`canonical_params`).

    Engine options (``--engine-opt``) are not parameters: they keep their names as typed.
    """
    return canonical_params(parse_kv(items, flag))


def command_line() -> tuple[str, ...]:
    """The command that runs, redacted once here, as a study records it (empty when autotune runs in-process,
    e.g. under pytest: the recorded line must be one a user can run again)."""
    if not sys.argv or "autotune" not in sys.argv[0]:
        return ()
    return tuple(redact_command(["autotune", *sys.argv[1:]]))


def write_json(path: str, data: Any, workdir: str | None = None) -> None:
    """``data``, redacted, as indented JSON at ``path`` (``--json`` of every subcommand that has one)."""
    with open_output(path, "--json", workdir) as fh:
        json.dump(redact(data), fh, indent=2, default=str)


def open_output(path: str, flag: str, workdir: str | None = None, mode: str = "w") -> IO[Any]:
    """``path`` opened for writing, never through a symbolic link (one put there after the preflight check too),
    nor through a directory link leading out of the workdir or the working directory it was named in (issue 44):
    inside one of those, every directory on the way is opened without following links (``open_confined``)."""
    from autotune.core.confine import LinkRefused, confined_output, open_confined, output_roots

    roots = output_roots(workdir)
    try:
        confined = confined_output(path, roots)
        if confined is not None:
            return open_confined(*confined, mode)
    except LinkRefused as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise UsageError(f"{flag} {path}: is a symbolic link; autotune does not write through links: give the "
                             "real path, or remove the link") from None
        raise
    return os.fdopen(fd, mode)


def default_study_name(space: SearchSpace, engine: str) -> str:
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


def add_workdir_arg(parser: argparse.ArgumentParser, default: str = DEFAULT_WORKDIR) -> None:
    parser.add_argument("--workdir", default=default, help="engine caches and logs (default: %(default)s)")


def add_output_args(parser: argparse.ArgumentParser, tracking_note: str = "") -> None:
    """Where a study's results go (MLflow, a JSON report) and how much is printed: ``tune`` and ``worker``."""
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI "
                        f"or sqlite:///mlruns/mlflow.db{tracking_note})")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("--quiet", action="store_true", help="only the progress bar and the final report")


@dataclasses.dataclass(frozen=True)
class StudyOutput:
    """Where a running study's results go (:func:`add_output_args`), read from the command line once: MLflow (the
    tracking URI as given: a worker ``tune --gpus`` starts is handed the same flag), the ``--json`` file and the
    directory it is confined to when it lies inside it (``--workdir``; :func:`open_output`), how much is printed."""

    tracking_uri: str | None = None
    mlflow: bool = True
    json_path: str | None = None
    quiet: bool = False
    workdir: str | None = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> StudyOutput:
        return cls(tracking_uri=args.tracking_uri, mlflow=not args.no_mlflow, json_path=args.json, quiet=args.quiet,
                   workdir=args.workdir)

    @property
    def tracking_store(self) -> str:
        """The MLflow store the results go to: ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else the default."""
        from autotune.observers.mlflow import resolve_tracking_uri

        return resolve_tracking_uri(self.tracking_uri)

    def write_json(self, data: Any) -> None:
        """``data`` as the ``--json`` file, when there is one (:func:`write_json`)."""
        if self.json_path:
            write_json(self.json_path, data, self.workdir)


def load_space_for(args: argparse.Namespace) -> SearchSpace:
    """The space ``--space`` names, as every command that takes one loads it (``tune``, ``audit``, ``doctor``):
    the file validated (:func:`autotune.config.space.load_space`), then every engine section it holds checked
    by its engine (:func:`check_engine_sections`), so a bad space is the same line in every command."""
    from autotune.config.space import load_space

    space = load_space(args.space)
    check_engine_sections(space)
    if getattr(args, "model", None):
        space = space.with_model(args.model)
    return space


def stored_space_dir(space_file: str | None) -> Path | None:
    """Where a stored space's relative paths (``./`` drafts) resolve: the directory of the file the study was
    started from, where it still exists (else the current directory, as for a space given on the command line)."""
    from pathlib import Path

    if space_file:
        parent = Path(space_file).expanduser().resolve().parent
        if parent.is_dir():
            return parent
    return None


def check_engine_sections(space: SearchSpace) -> None:
    """Every engine section of the space is valid for its engine, whichever engine this command runs: a bad
    ``engine.vllm.memory_floor_gib`` is refused by ``tune --engine sim`` and ``doctor`` alike, in one line naming the
    file. Engines are only constructed (options parsed), never started."""
    from autotune.engines import EngineOptionError, make_engine

    for name, options in space.engine.sections().items():
        try:
            engine = make_engine(name, None, **options)  # no cache: it is never started
        except EngineOptionError as exc:  # the space's fault; a machine that cannot run the engine is not (exit 1)
            raise UsageError(f"{space.source}: {exc}") from None
        engine.close()


def check_references(space: SearchSpace, engine_options: RawOptions, engine_name: str) -> None:
    """Every ``${VAR}`` the engine will resolve when it starts is set, and no value is ``<redacted>`` (a credential
    an older autotune stored with no way back): checked before anything is created or started, so the line names
    the variable and the field rather than an engine failing with 401 at its first start (autotune.core.secrets).

    Raises:
        UsageError: one line naming the field, the variable and the fix.
    """
    parts = [("engine_args", space.engine_args), (f"engine.{engine_name}", dict(engine_options)),
             *((f"search.drafts.{d.name}", d.fragment) for d in space.drafts),
             ("workload.dataset.args", dict(getattr(space.workload.dataset, "args", None) or ()))]
    for field, value in parts:
        problem = unresolvable(value, field)
        if problem is not None:
            raise UsageError(f"{space.source}: {problem}")


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    """The engine a command runs and its options, chosen once: the name (``--engine``, else the space's
    ``engine.name``, else ``vllm``), the space's ``engine:`` options for it with the command line's over them
    (:meth:`~autotune.config.space.EngineSection.options`), every ``${VAR}`` in them checked set
    (:func:`check_references`). ``typed``: the ``--engine-opt`` items as typed, handed on to ``tune --gpus``'s
    workers."""

    name: str
    options: RawOptions
    typed: tuple[str, ...] = ()

    @classmethod
    def for_space(cls, space: SearchSpace, name: str | None, typed: Sequence[str] | None = None,
                  overrides: RawOptions | None = None) -> EngineChoice:
        """The engine ``name`` (else the space's) with the space's options, ``typed`` (``--engine-opt`` items, read
        by :func:`parse_kv`) or ``overrides`` (already read) over them."""
        chosen = name or space.engine.default
        options = {**space.engine.options(chosen),
                   **(overrides if overrides is not None else parse_kv(typed, "--engine-opt"))}
        check_references(space, options, chosen)
        return cls(chosen, options, tuple(typed or ()))

    @classmethod
    def joining(cls, space: SearchSpace, name: str, stored: RawOptions, overrides: RawOptions,
                typed: Sequence[str] | None = None) -> EngineChoice:
        """A study's own engine with the options it stored, this machine's ``--engine-opt`` (``overrides``, read from
        ``typed``) over them: a worker that joins the study, from this machine or another."""
        options = {**dict(stored), **overrides}
        # The stored space and options hold references (${HF_TOKEN}): each must be set on this machine.
        check_references(space, options, name)
        return cls(name, options, tuple(typed or ()))

    def make(self, space: SearchSpace, cache_dir: str | None = None) -> EngineBackend:
        """The engine, its options validated once by it into ``engine.settings``, and ``space`` checked by it."""
        engine: EngineBackend = make_engine_from_input(self.name, cache_dir, self.options)
        engine.check(space)
        return engine


def build_engine(space: SearchSpace, name: str | None, options: RawOptions, cache_dir: str | None = None
                 ) -> EngineBackend:
    """The engine named on the command line, else the space's ``engine.name``, else ``vllm`` (:class:`EngineChoice`).

    Engine options come from the space's ``engine:`` section (:meth:`~autotune.config.space.EngineSection.options`);
    ``--engine-opt`` overrides them. The engine validates the two together, once, into ``engine.settings``.
    """
    check_engine_name(name or space.engine.default)  # an unknown engine is named before its options are read
    return EngineChoice.for_space(space, name, overrides=options).make(space, cache_dir)


def check_engine_name(name: str) -> None:
    """``name`` (``--engine``, or the space's ``engine.name``) is an engine autotune has."""
    from autotune.engines import ENGINES

    if name not in ENGINES:
        raise UsageError(f"--engine {name!r} is not an engine: choose one of {', '.join(sorted(ENGINES))}")


def make_engine_from_input(name: str, cache_dir: str | None, options: RawOptions) -> EngineBackend:
    """The engine ``name`` with options the user gave (the space, ``--engine-opt``, a study's stored options): an
    option the engine refuses is bad input, one line and exit 2 like every other, not an engine failure."""
    from autotune.engines import EngineOptionError, make_engine

    try:
        return make_engine(name, cache_dir=cache_dir, **dict(options))
    except EngineOptionError as exc:
        raise UsageError(str(exc)) from None


def open_named_study(args: argparse.Namespace) -> Ledger:
    """The ledger of the study ``--study`` names in ``--storage`` (the latest one without ``--study``).

    The store is checked first (:func:`autotune.store.health.check_storage`): a bad URL, a missing or corrupt
    database is one line, and reading never creates a store.
    """
    from autotune.core.urls import StorageUrl

    storage = StorageUrl.parse(args.storage)
    check_storage(storage, write=False)
    return load(args.study or latest_study_name(storage), storage)
