"""Writing inside the directory autotune was given, never through a symbolic link out of it (issue 44).

A study's directory (``<workdir>/<study>``) holds what autotune writes for it: engine logs, compile-cache markers,
the workers' logs. A symbolic link put inside it (``logs -> /elsewhere``) would carry those writes anywhere the
link points. Every write below such a directory goes through :func:`open_confined` (a file) or
:func:`confined_dir` (a directory a child process writes into): each part of the path below the root is opened
with ``O_NOFOLLOW`` relative to its parent's descriptor (``openat``), so a link is refused whatever it points
at, and a link swapped in between a check and the write is refused too. :func:`links_out_of` lists the links
already there that lead out, for a one-line refusal before a study starts.

The root itself is the user's to choose (``--workdir`` may well be a link to a big disk); only what lies below it
is confined.

An output a flag names (``report --json PATH``, ``export --out PATH``, ``bench --out DIR``) follows the same rule
(:func:`confined_output`): its root is the directory it was named in, the workdir when it lies there, else the
working directory; a symbolic link on its way below that root that leads out of it is refused, and the file is
opened through :func:`open_confined` from the root's real path. A path outside every root (an absolute path
elsewhere, ``../x``) names its directory itself and is written there as given, never through a link as its last
part.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import IO, Any

__all__ = ["LinkRefused", "OutputLink", "confined_dir", "confined_output", "links_out_of", "open_confined",
           "output_roots"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkRefused(OSError):
    """A path below the root passes through a symbolic link (or leaves the root); the message names it and the
    fix."""

    def __init__(self, path: Path, root: Path, why: str) -> None:
        super().__init__(errno.ELOOP, f"{path}: {why}; autotune writes only inside {root} and does not follow links "
                                      "out of it: remove the link (or choose another --workdir)")
        self.path, self.root = path, root


def _parts(root: Path, path: str | os.PathLike[str]) -> tuple[str, ...]:
    """``path`` (absolute, or relative to ``root``) as the names below ``root``; refused if it leaves ``root``.

    A caller holding ``root / name`` with a relative ``root`` passes it through :func:`os.path.abspath` first: a
    relative path is taken below ``root``, so ``root / name`` would name ``root / root / name``.
    """
    target = Path(path)
    if target.is_absolute():
        target = Path(os.path.abspath(target))  # ``..`` folded away by name, before it could climb out
        if not _lexically_inside(target, root):
            raise LinkRefused(target, root, "lies outside the directory autotune writes in")
        return target.relative_to(root).parts
    if ".." in target.parts:
        raise LinkRefused(root / target, root, "climbs out of the directory autotune writes in ('..')")
    return target.parts


def _lexically_inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _refusal(root: Path, here: Path) -> LinkRefused:
    try:
        target = os.readlink(here)
    except OSError:
        return LinkRefused(here, root, "is not a directory")
    return LinkRefused(here, root, f"is a symbolic link (to {target})")


def _open_chain(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of ``root/parts...``: each part a real directory (made if missing and ``create``), no link.
    The root itself is made if missing (it is the directory autotune was given)."""
    if create:
        os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    try:
        for part in parts:
            here = here / part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile (another worker): opened and checked below
                    os.mkdir(part, 0o777, dir_fd=fd)
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _refusal(root, here) from None
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refusal(root, here) from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def confined_dir(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """``path`` (below ``root``) as a directory, made if missing, every part of it below ``root`` a real directory.

    For a directory another process writes into (an engine's cache): that process does not open through this
    module, so the directory is checked as it is handed over.

    Raises:
        LinkRefused: a part is a symbolic link or a file, or ``path`` lies outside ``root``.
    """
    base = Path(os.path.abspath(root))
    parts = _parts(base, path)
    os.close(_open_chain(base, parts, create=True))
    return base.joinpath(*parts)


def open_confined(root: str | os.PathLike[str], path: str | os.PathLike[str], mode: str = "w",
                  **kwargs: Any) -> IO[Any]:
    """``path`` (below ``root``) opened for writing (``mode`` ``w``, ``wb``, ``a``, ``ab`` or ``x``), its directories
    made as :func:`confined_dir` makes them, the file itself opened with ``O_NOFOLLOW``.

    Raises:
        LinkRefused: the file or a directory on its way is a symbolic link, or it lies outside ``root``.
    """
    base = Path(os.path.abspath(root))
    parts = _parts(base, path)
    if not parts:
        raise LinkRefused(base, base, "is the directory itself, not a file in it")
    flags = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}[mode.replace("b", "")[:1]]
    parent = _open_chain(base, parts[:-1], create=True)
    try:
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refusal(base, base.joinpath(*parts)) from None
        raise
    finally:
        os.close(parent)
    return os.fdopen(fd, mode, **kwargs)


def links_out_of(root: str | os.PathLike[str], limit: int = 10) -> list[tuple[Path, str]]:
    """The symbolic links below ``root`` that lead out of it (or dangle out of it), with their targets: at most
    ``limit`` of them. Links are not followed while looking, so a loop or a link to ``/`` costs nothing."""
    base = Path(os.path.realpath(root))
    found: list[tuple[Path, str]] = []
    if not base.is_dir():
        return found
    for here, dirs, files in os.walk(base, followlinks=False):
        for name in (*dirs, *files):
            path = Path(here) / name
            if not path.is_symlink():
                continue
            resolved = Path(os.path.realpath(path))
            if not _lexically_inside(resolved, base):
                found.append((path, os.readlink(path)))
                if len(found) >= limit:
                    return found
    return found


class OutputLink(LinkRefused):
    """An output path whose way below its root passes a symbolic link leading out of the root."""

    def __init__(self, path: Path, root: Path, link: Path, target: str) -> None:
        OSError.__init__(self, errno.ELOOP, f"{link} is a symbolic link (to {target}) leading out of {root}, where "
                                            f"{path} was named; autotune does not follow links out of the directory "
                                            f"an output is named in: give the real path "
                                            f"({os.path.realpath(path)}), or remove the link")
        self.path, self.root, self.link = path, root, link


def output_roots(workdir: str | None = None) -> tuple[str, ...]:
    """The directories an output a command's flag names is confined to when it lies in one (:func:`confined_output`):
    the command's ``--workdir``, then the working directory."""
    return (*([workdir] if workdir else []), os.getcwd())


def confined_output(path: str | os.PathLike[str], roots: Any) -> tuple[Path, Path] | None:
    """Where an output named ``path`` is written: ``(root, target)``, both real paths, for
    :func:`open_confined` (``target`` below ``root``), when one of ``roots`` (the first that holds ``path`` by
    name: the workdir, then the working directory) holds it; ``None`` when none does (written as given).

    A link on the way that stays inside the root is followed (its real path is written); one that leads out of it
    is refused: a file named inside a directory stays inside it (issue 44, principle 3).

    Raises:
        OutputLink: a directory on ``path``'s way below its root is a link leading out of the root.
    """
    target = Path(os.path.abspath(path))
    for root in roots:
        if root is None:
            continue
        base = Path(os.path.abspath(root))
        if target == base or not _lexically_inside(target, base):
            continue
        real_base = Path(os.path.realpath(base))
        real_parent = Path(os.path.realpath(target.parent))
        if not _lexically_inside(real_parent, real_base):
            here = base
            for part in target.parent.relative_to(base).parts:
                here = here / part
                if here.is_symlink() and not _lexically_inside(Path(os.path.realpath(here)), real_base):
                    raise OutputLink(target, base, here, os.readlink(here))
            raise OutputLink(target, base, target.parent, os.path.realpath(target.parent))  # pragma: no cover
        return real_base, real_parent / target.name
    return None
