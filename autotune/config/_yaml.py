"""Reading a space file: the file itself (a readable UTF-8 text file), then its YAML, with aliases bounded.

Every problem is one :class:`~autotune.config.space.SpaceError`-shaped line naming the file and the fix, raised
through ``fail(field, problem, fix)``, so every command that reads a space gives the same line (issue 32).

YAML aliases are bounded: PyYAML builds ``*a`` as a shared reference, so a 2 KB "billion laughs" file loads at
once and then makes every walk over it (validation, the digest, the finite-number check) take forever. The
composed document is sized as it would be written out, with every alias expanded; above :data:`MAX_NODES` nodes, or
an alias inside its own anchor, it is refused before anything walks it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from autotune.core.inputs import InputFileError, read_input

__all__ = ["MAX_NODES", "read_text", "load_yaml"]

#: Bytes a space file may have: the largest shipped space is 4 KB, and MAX_NODES values written out fit in a few MiB.
MAX_SPACE_BYTES = 16 * 1024 * 1024

#: Nodes a space file may hold with every alias expanded. The largest shipped space has a few hundred; a space with
#: a generated list of a thousand sizes still fits.
MAX_NODES = 100_000

Fail = Callable[[str, str, str], Exception]


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int, first_line: int) -> None:
        super().__init__(f"key {key!r} appears twice (lines {first_line} and {line})")
        self.key, self.line, self.first_line = key, line, first_line


class _AliasProblem(yaml.YAMLError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key repeated in one mapping is an error rather than a silent overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: PyYAML reports it itself below
            if first is not None:
                raise _DuplicateKey(key, key_node.start_mark.line + 1, first)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root: yaml.Node) -> int:
    """Nodes of ``root`` with every alias expanded (each shared node counted once per use), without expanding.

    Raises:
        _AliasProblem: an alias refers to a node that contains it, or the size passes :data:`MAX_NODES`.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes and not done:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        if done:
            open_nodes.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > MAX_NODES:
                raise _AliasProblem(f"expands to more than {MAX_NODES} values through its aliases",
                                    node.start_mark.line + 1)
            sizes[key] = total
            continue
        if key in open_nodes:
            raise _AliasProblem("has an alias inside its own anchor (a loop)", node.start_mark.line + 1)
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise _AliasProblem("has an alias inside its own anchor (a loop)", child.start_mark.line + 1)
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def read_text(path: str | os.PathLike[str], fail: Fail, what: str = "space file",
              example: str = "search_spaces/default.yaml") -> str:
    """The text of ``path``: one line naming the file and the fix when it is missing, a directory, unreadable or
    not UTF-8 text."""
    target = Path(path)
    try:
        body = read_input(target, MAX_SPACE_BYTES)  # a FIFO, a device or a huge file: one line, at once
        return body.decode("utf-8")
    except InputFileError as exc:
        raise fail("file", exc.problem, exc.fix) from None
    except FileNotFoundError:
        raise fail("file", "does not exist", f"pass an existing file, e.g. {example}") from None
    except IsADirectoryError:
        raise fail("file", "is a directory", f"pass the {what} inside it, e.g. {example}") from None
    except PermissionError:
        raise fail("file", "cannot be read (permission denied)",
                   f"make it readable (chmod u+r {target}) or pass a copy you can read") from None
    except UnicodeDecodeError as exc:
        line = body[:exc.start].count(b"\n") + 1
        raise fail(f"line {line}", "is not UTF-8 text", "save the file as UTF-8") from None
    except OSError as exc:
        raise fail("file", f"cannot be read ({exc.strerror or exc})", f"pass a readable {what}") from None


def load_yaml(text: str, fail: Fail) -> Any:
    """``text`` as YAML: duplicate keys refused, aliases bounded; every problem one line through ``fail``."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except _AliasProblem as exc:
        problem, line = exc.args
        raise fail(f"line {line}", f"the YAML {problem}",
                   "write the values out, or use fewer nested aliases (*name)") from None
    except _DuplicateKey as exc:
        raise fail(f"line {exc.line}", f"duplicate key {exc.key!r} (first at line {exc.first_line}; YAML would "
                   "silently keep only the last one)", "merge the two blocks into one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "file"
        problem = getattr(exc, "problem", None) or "is not valid YAML"
        raise fail(where, f"invalid YAML ({problem})", "fix the YAML syntax at that line") from None
    finally:
        loader.dispose()
