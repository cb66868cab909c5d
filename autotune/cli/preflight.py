"""Checks that run before a study starts its first engine: a study must not fail after an hour for a bad flag.

Every check raises :class:`PreflightError` with one line naming the flag (or file) and the fix. They cover what the
engine never sees: the study name, numeric flags whose bad values would only fail deep inside Optuna or numpy,
the MLflow SQLite store, and every output file
the command will write at the end - which must not be anything autotune reads or keeps (the storage, the MLflow
store, the space file, the dataset, the study's directory), however the path reaches it. Whether the Optuna storage
can be used is the store's to say (:mod:`autotune.store.health`, raising ``StoreNotUsable``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from autotune.core.urls import StorageUrl, redact_url, sqlite_path
from autotune.store.health import SQLITE_SIDECARS, check_sqlite_writable, probe_dir
from autotune.store.studydir import check_study_name

if TYPE_CHECKING:
    import argparse

    from autotune.core.records import Workload
    from autotune.engines import EngineBackend

__all__ = [
    "MAX_SEED",
    "PreflightError",
    "Protected",
    "check_budget",
    "check_budget_covers",
    "check_command_paths",
    "check_count",
    "check_fresh",
    "check_output_path",
    "check_page_cache",
    "check_study_name_flag",
    "check_tracking_store",
    "dataset_path",
    "protected_paths",
]

#: Optuna's samplers seed numpy, which takes seeds in [0, 2**32).
MAX_SEED = 2**32 - 1


class PreflightError(ValueError):
    """A flag or a store that cannot work; the message is one line naming it and the fix."""


def check_study_name_flag(name: str) -> None:
    problem = check_study_name(name)
    if problem is not None:
        raise PreflightError(f"--study: the study name {problem}; use letters, digits, '-', '_' and '.' "
                             "(no '/'), e.g. --study my-model-h200")


#: The most a counting flag takes: far over any study a person runs, low enough that a slip of the keyboard (a few
#: zeros too many) is refused at once instead of planning, or running, a million engine starts. ``--top-k`` times
#: ``--verify-restarts`` is what verification plans before anything runs: 100 x 1000 entries stay instant.
MAX_TRIALS = 100_000
MAX_RESTARTS = 1_000
#: ``--top-k``: the most configurations a user may ask to verify (the default is ``study.options.DEFAULT_TOP_K``).
MAX_TOP_K_FLAG = 100
MAX_BUDGET_RESTARTS = 1_000_000
#: A year of engine time.
MAX_BUDGET_MINUTES = 365 * 24 * 60
#: A worker silent for four heartbeats is taken for dead: a day between them is already no liveness check.
MAX_HEARTBEAT_S = 24 * 3600


def check_count(flag: str, value: int | None, low: int, high: int, why: str = "") -> None:
    """A counting flag, when given, within ``[low, high]``: one rule for every command's counts."""
    if value is not None and not low <= value <= high:
        raise PreflightError(f"{flag} must be between {low} and {high}{why}, got {value}")


def check_budget(budget_restarts: int | None, budget_minutes: float | None) -> None:
    """A budget, when given, is positive."""
    if budget_restarts is not None and budget_restarts < 1:
        raise PreflightError(f"--budget-restarts must be >= 1, got {budget_restarts}")
    check_count("--budget-restarts", budget_restarts, 1, MAX_BUDGET_RESTARTS, " engine starts")
    if budget_minutes is not None and not (math.isfinite(budget_minutes) and 0 < budget_minutes <= MAX_BUDGET_MINUTES):
        raise PreflightError(f"--budget-minutes must be a positive number of minutes, at most {MAX_BUDGET_MINUTES} "
                             f"(a year), got {budget_minutes:g}")


def check_command_paths(args: argparse.Namespace) -> None:
    """The ``--workdir`` every command that takes one is given, checked before the command runs (issue 32): a
    directory, or a path one can be made at. (Output flags are each command's to check, with what it must not
    overwrite: :func:`check_output_path`.)"""
    workdir = getattr(args, "workdir", None)
    if isinstance(workdir, str):
        _check_workdir(workdir)


def check_tracking_uri_of(args: argparse.Namespace) -> None:
    """The MLflow tracking URI of every command that logs to MLflow (``--tracking-uri``, else
    ``$MLFLOW_TRACKING_URI``), unless it was told ``--no-mlflow``: a URI MLflow cannot use (a scheme it does not know,
    a malformed one) is one line naming where it came from and the fix, before anything is created (issue 44,
    principle 5). A command that ran on with it would run without MLflow, which is not what the flag asked for.
    Commands without ``--tracking-uri`` (``report``, ``export``) never log to MLflow: they read the variable only to
    keep their output off the store's files, so it is not theirs to refuse."""
    if not hasattr(args, "tracking_uri") or getattr(args, "no_mlflow", False):
        return
    from autotune.observers.mlflow import tracking_uri_problem

    flag = args.tracking_uri
    name, uri = ("--tracking-uri", flag) if flag is not None else \
        ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI") or None)
    if uri is None:
        return  # the default store
    problem = "it is empty" if not uri.strip() else tracking_uri_problem(uri)
    if problem is None:
        return
    off = ", or pass --no-mlflow" if hasattr(args, "no_mlflow") else ""
    raise PreflightError(f"{name} {shown_uri(uri)!r}: {problem}; give a tracking URI MLflow can open "
                         f"(sqlite:///mlruns/mlflow.db, http://HOST:5000, postgresql://HOST/DB or a directory){off}")


def shown_uri(uri: str) -> str:
    """``uri`` as an error line may show it: everything before its last ``@`` after the scheme hidden (user and
    password both), since a URI refused as malformed cannot be trusted to split where a parser would."""
    return re.sub(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?(?://)?).*@", r"\1***@", uri, flags=re.S)


def _check_workdir(workdir: str) -> None:
    """``--workdir`` names a directory, or a path one can be made at: no part of it is a file."""
    path = Path(workdir)
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                what = "is a file" if part == path else f"is inside {part}, which is a file"
                raise PreflightError(f"--workdir {workdir}: {what}, not a directory; give a directory (made if "
                                     "missing), e.g. --workdir mlruns/autotune")
            return


def check_budget_covers(budget_restarts: int | None, needed: int, why: str) -> None:
    """A restart budget covers at least the ``needed`` starts (``why`` says what they are for)."""
    if budget_restarts is not None and budget_restarts < needed:
        raise PreflightError(f"--budget-restarts {budget_restarts} cannot measure anything: {why} need {needed} "
                             f"engine starts; give at least --budget-restarts {needed}")


@dataclasses.dataclass(frozen=True)
class Protected:
    """A path an output flag must never write: ``what`` it is, and whether everything under it counts too."""

    path: str
    what: str
    tree: bool = False


def _sqlite_protected(db: Path, what: str) -> list[Protected]:
    return [Protected(str(db), what), *(Protected(f"{db}{suffix}", what) for suffix in SQLITE_SIDECARS)]


def protected_paths(*, storage: StorageUrl | None = None, tracking_uri: str | None = None,
                    space_file: str | None = None, dataset: str | None = None,
                    study_dir: str | os.PathLike[str] | None = None) -> list[Protected]:
    """What a command's output flags must leave alone: the Optuna storage's SQLite file, the MLflow store (its
    SQLite file and the artifacts next to it, or a file store's directory), the space file, the dataset file, and
    the study's directory under ``--workdir``. Stores reached over a network have no local path to protect."""
    out: list[Protected] = []
    if storage is not None and storage.sqlite_file is not None:
        out += _sqlite_protected(storage.sqlite_file, "the Optuna storage (every study in it)")
    if tracking_uri:
        db = sqlite_path(tracking_uri)
        if db is not None:
            out += _sqlite_protected(db, "the MLflow store")
            out.append(Protected(str(db.parent / "artifacts"), "the MLflow artifact store", tree=True))
        elif tracking_uri.startswith("file:") or "://" not in tracking_uri:
            local = tracking_uri[len("file://"):] if tracking_uri.startswith("file://") else \
                tracking_uri.removeprefix("file:")
            out.append(Protected(local, "the MLflow store", tree=True))
    if space_file:
        out.append(Protected(space_file, "the space file"))
    if dataset:
        out.append(Protected(dataset, "the dataset"))
    if study_dir is not None:
        out.append(Protected(str(study_dir), "the study's directory (engine caches and logs)", tree=True))
    return out


def dataset_path(workload: Workload | Mapping[str, object]) -> str | None:
    """The dataset file of a parsed workload or of a study's recorded workload mapping, if it names one."""
    dataset = workload.get("dataset") if isinstance(workload, Mapping) else getattr(workload, "dataset", None)
    path = dataset.get("path") if isinstance(dataset, Mapping) else getattr(dataset, "path", None)
    return None if path is None else str(path)


def _same_file(a: str, b: str) -> bool:
    """Both exist and are one file (a hard link, or the same file through different paths)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip(os.sep) + os.sep)


def _clash(path: str, protected: Iterable[Protected]) -> Protected | None:
    """The protected path ``path`` would overwrite: resolved with symbolic links followed, or the same inode."""
    real = os.path.realpath(path)
    for item in protected:
        mine = os.path.realpath(item.path)
        if real == mine or (item.tree and _inside(real, mine)) or _same_file(path, item.path):
            return item
    return None


def check_output_path(path: str, flag: str, protected: Iterable[Protected] = (), *, links: bool = True,
                      workdir: str | None = None) -> None:
    """``path`` can be written at the end of the run: its directory exists and takes files, it is not a directory,
    and it is none of the ``protected`` paths (:func:`protected_paths`), through a symbolic or a hard link or not;
    with ``links``, it is no symbolic link at all (a first check before the protected paths are known leaves
    links to the second, which names what a link reaches). ``-`` is refused: only ``report --json -`` means stdout
    (its caller handles it before this check), elsewhere stdout carries the command's own output and a file named
    ``-`` is never what was meant."""
    if path == "-":
        name = "report.json" if flag == "--json" else "winner.yaml"
        raise PreflightError(f"{flag} -: this command writes {flag} to a file, not to stdout (which carries its own "
                             f"output); give a file path, e.g. {flag} {name}")
    # A directory link on the way out of the workdir or the working directory the path was named in (issue 44,
    # principle 3; the rule is core.confine's): refused before the command runs, as the write would refuse it.
    from autotune.core.confine import LinkRefused, confined_output, output_roots

    try:
        confined_output(path, output_roots(workdir))
    except LinkRefused as exc:
        raise PreflightError(f"{flag} {path}: {exc.strerror}") from None
    clash = _clash(path, protected)
    if clash is not None:
        shown = path if os.path.realpath(path) == os.path.realpath(clash.path) else \
            f"{path} (which is {os.path.realpath(path)})"
        name = "report.json" if flag == "--json" else "winner.yaml"
        where = "inside" if clash.tree else "is"
        raise PreflightError(f"{flag} {shown}: {where} {clash.what} ({clash.path}), which autotune will not "
                             f"overwrite; write elsewhere, e.g. {flag} {name}")
    target = Path(path)
    if links and os.path.islink(path):
        # A link may point anywhere (or nowhere yet): autotune writes only where it was told, never through a link
        # to a file it did not create - and a dangling one would be found only after the whole study ran.
        raise PreflightError(f"{flag} {path}: is a symbolic link (to {os.readlink(path)}); autotune does not write "
                             f"through links: give the real path, or remove the link")
    if target.is_dir():
        raise PreflightError(f"{flag} {path}: is a directory; give a file name, e.g. {flag} {target / 'report.json'}")
    parent = target.parent
    if not parent.is_dir():
        raise PreflightError(f"{flag} {path}: directory {parent} does not exist; create it first or write elsewhere")
    if target.exists():
        try:
            with open(target, "a"):
                pass
        except OSError as exc:
            raise PreflightError(f"{flag} {path}: cannot be written ({exc.strerror}); write elsewhere") from None
        return
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".autotune-probe-"):
            pass
    except OSError as exc:
        raise PreflightError(f"{flag} {path}: cannot create files in {parent} ({exc.strerror}); "
                             "write elsewhere") from None


def check_page_cache(engine: EngineBackend, out: IO[str]) -> None:
    """The engine's page-cache policy can run here: an explicit ``engine.page_cache: drop`` or ``warm`` without root
    is refused before anything starts; a default that fell back to keep for want of root is one note line on
    ``out``. Engines without a :class:`~autotune.machine.StartSafety` (the simulator) have no policy."""
    safety = getattr(engine, "safety", None)
    plan = getattr(safety, "page_cache", None)
    if plan is None:
        return
    refusal = plan.refusal()
    if refusal is not None:
        raise PreflightError(refusal)
    note = plan.note()
    if note is not None:
        print(f"note: {note}", file=out)


def check_fresh(storage: StorageUrl, study_name: str) -> None:
    """``--fresh`` may delete the study: no live process holds one of its trials or claims (CC03, CC04)."""
    from autotune.store import live_holders

    db = storage.sqlite_file
    if db is not None and not db.exists():
        return  # no store yet, so no one runs the study (and opening it would create the file)
    holders = live_holders(storage.url, study_name)
    if holders:
        more = f" and {len(holders) - 1} more" if len(holders) > 1 else ""
        first = holders[0]
        stop = f"stop it first (Ctrl-C there, or kill -TERM {first.pid} on {first.host})" if first.pid is not None \
            else "stop it first"
        raise PreflightError(f"--fresh: study {study_name!r} is being run right now by {first}{more}; deleting it "
                             f"would pull it from under that run: {stop}, or start this one under another --study")


def check_tracking_store(uri: str) -> None:
    """The MLflow store, where it can be checked without a network call: an SQLite file must be writable.

    MLflow itself retries a locked or read-only SQLite store for minutes before giving up.
    """
    db = sqlite_path(uri)
    if db is not None:
        check_sqlite_writable(db, f"--tracking-uri {redact_url(uri)}")
