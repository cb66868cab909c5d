"""Study names and the study's working directory: autotune deletes only what it created.

A study's engine caches and logs live in ``<workdir>/<study name>``. The name comes from the command line, so it
is checked like a file name (no path separators, not ``.`` or ``..``, not too long for a file system) before
anything is opened. The directory is created with a marker file inside it; ``--fresh`` empties only a directory
that carries the marker and lies inside ``workdir``, and refuses anything else with one line, so ``--study
/tmp/victim --fresh`` or ``--workdir /data/models --study Qwen3-8B --fresh`` delete nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import unicodedata
from pathlib import Path

from autotune.core.confine import LinkRefused, links_out_of, open_confined

__all__ = [
    "MARKER",
    "MAX_NAME_BYTES",
    "NotOwned",
    "check_no_links_out",
    "check_study_name",
    "prepare_study_dir",
    "remove_study_dir",
    "study_dir",
]

#: The file that says "autotune created this directory for this study".
MARKER = ".autotune-study"
#: Longest study name, in UTF-8 bytes: a file name is at most 255 bytes, and the name also goes into MLflow
#: run names and log file names.
MAX_NAME_BYTES = 128


class NotOwned(Exception):
    """A study directory autotune did not create (or one outside the workdir); the message names it and the fix."""


def check_study_name(name: str) -> str | None:
    """Why ``name`` cannot be a study name, or ``None`` when it can.

    A study name becomes a directory name under ``--workdir``: it must not contain a path separator, be ``.`` or
    ``..``, be empty, start with ``-`` or hold control characters, and must fit in :data:`MAX_NAME_BYTES` bytes.
    """
    if not name or not name.strip():
        return "is empty"
    if name in (".", ".."):
        return f"{name!r} is a directory reference, not a name"
    bad = [c for c in ("/", "\\", "\0") if c in name] + [os.sep] * (os.sep not in ("/", "\\") and os.sep in name)
    if bad:
        return f"{name!r} contains the path separator {bad[0]!r}"
    if any(unicodedata.category(c).startswith("C") for c in name):
        return f"{name!r} contains a control character"
    if name.startswith("-"):
        return f"{name!r} starts with '-' (it would read as an option)"
    if name != name.strip():
        return f"{name!r} starts or ends with whitespace"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"is {size} bytes long; the limit is {MAX_NAME_BYTES}"
    return None


def study_dir(workdir: str | os.PathLike[str], name: str) -> Path:
    """``<workdir>/<name>``, checked to lie inside ``workdir`` once symbolic links are resolved.

    Raises:
        NotOwned: the path escapes ``workdir`` (a symbolic link pointing elsewhere).
        ValueError: ``name`` is not a valid study name.
    """
    problem = check_study_name(name)
    if problem is not None:
        raise ValueError(f"study name {problem}")
    root = Path(workdir).resolve()
    path = Path(workdir) / name
    resolved = path.resolve()
    if resolved.parent != root:
        raise NotOwned(f"{path} resolves to {resolved}, outside --workdir {workdir}: autotune only writes study "
                       "directories inside it; remove the link or choose another --study")
    return path


def _owned(path: Path, name: str) -> bool:
    try:
        data = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("study") == name


def prepare_study_dir(workdir: str | os.PathLike[str], name: str, fresh: bool = False) -> Path:
    """The study's directory, created with its marker; with ``fresh``, emptied first if autotune created it.

    An existing empty directory is adopted (nothing of anyone's is in it). A non-empty one without the marker
    belongs to someone else: autotune neither empties nor writes into it.

    Raises:
        NotOwned: the directory exists, is not empty and was not created by autotune for this study.
        ValueError: ``name`` is not a valid study name.
    """
    path = study_dir(workdir, name)
    check_owned(workdir, name)
    if fresh and path.exists():
        remove_study_dir(workdir, name)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).exists():
        try:
            with contextlib.suppress(FileExistsError), open_confined(path, MARKER, "x") as fh:  # or another worker's
                fh.write(json.dumps({"study": name, "created_by": "autotune"}) + "\n")
        except LinkRefused as exc:
            raise NotOwned(str(exc)) from None
        except OSError as exc:  # a write() error names no file: name it, so a full disk names the workdir (FS04)
            (path / MARKER).unlink(missing_ok=True)  # a half-written marker of our own would read as foreign
            raise OSError(exc.errno, exc.strerror, str(path / MARKER)) from exc
    return path


def check_no_links_out(path: Path) -> None:
    """Refuse a study directory holding a symbolic link that leads out of it (``logs -> /elsewhere``), before the
    study writes anything: autotune's own writes do not follow links (:mod:`autotune.core.confine`), and the
    engines it starts write into the same directories, so a link out is refused at once, in one line.

    Raises:
        NotOwned: the first such link, its target, and the fix.
    """
    links = links_out_of(path)
    if links:
        link, target = links[0]
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise NotOwned(f"{link} is a symbolic link to {target}, outside the study's directory {path}{more}: autotune "
                       "writes a study's logs and caches only inside it and does not follow links out; remove the "
                       "link (or choose another --workdir)")


def check_owned(workdir: str | os.PathLike[str], name: str) -> None:
    """Raise :class:`NotOwned` unless ``<workdir>/<name>`` is absent, empty, or marked as this study's and free of
    links out of it (:func:`check_no_links_out`)."""
    path = study_dir(workdir, name)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise NotOwned(f"{path} exists and is not a directory autotune created: choose another --study or "
                       "--workdir")
    if _owned(path, name) or not any(path.iterdir()):
        check_no_links_out(path)
        return
    raise NotOwned(f"{path} exists and was not created by autotune (no {MARKER} file in it): autotune will not "
                   "write into or delete it; choose another --study or --workdir")


def remove_study_dir(workdir: str | os.PathLike[str], name: str) -> bool:
    """Delete ``<workdir>/<name>`` if autotune created it for this study. Returns whether anything was removed.

    Raises:
        NotOwned: the directory exists but carries no marker for this study.
    """
    path = study_dir(workdir, name)
    if not path.exists():
        return False
    if not _owned(path, name):
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()
            return True
        raise NotOwned(f"--fresh: {path} was not created by autotune for study {name!r} (no {MARKER} file): "
                       "nothing was deleted; remove it yourself or choose another --study or --workdir")
    shutil.rmtree(path)
    return True
