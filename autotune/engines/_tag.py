"""An engine's tag: who started it and for which workdir (issue 44).

Every process autotune starts for an engine carries a tag in its environment (``engines.process.TAG_ENV``), which its
descendants inherit: ``<pid>-<scope>-<id>``, the autotune that started it, the workdir it was started for (a short
hash of its real path, never the path), and a unique id. A container started for an engine carries the same scope in
its owner label. The next study's start stops a ``kill -9``'d autotune's engines only when they were started for its
own workdir: another workdir's are another run's (another test's, another user session's).

One module for the tag's form, read by :mod:`.process` (processes) and :mod:`._containers` (containers' labels).
"""

from __future__ import annotations

import hashlib
import os
import uuid

__all__ = ["current_scope", "new_tag", "scope_of", "set_scope", "tag_scope"]

#: The scope of the engines this process starts (:func:`set_scope`); before a command knows its workdir, and for a
#: command without one, ``w0``.
_scope = "w0"


def scope_of(workdir: str | os.PathLike[str]) -> str:
    """The scope token of ``workdir``: a short hash of its real path (a tag must not carry the path itself)."""
    return "w" + hashlib.sha1(os.path.realpath(os.fspath(workdir)).encode()).hexdigest()[:12]


def set_scope(workdir: str | os.PathLike[str]) -> str:
    """Tag the engines this process starts from now on as started for ``workdir``; returns the token."""
    global _scope
    _scope = scope_of(workdir)
    return _scope


def current_scope() -> str:
    """The scope the engines this process starts now are tagged with."""
    return _scope


def new_tag() -> str:
    """A fresh tag for an engine this autotune starts: its pid (the owner), its scope, and a unique id."""
    return f"{os.getpid()}-{_scope}-{uuid.uuid4().hex}"


def tag_scope(tag: str) -> str | None:
    """The scope a tag was started for (``None``: a tag of an autotune from before scopes)."""
    parts = tag.split("-")
    return parts[1] if len(parts) == 3 else None
