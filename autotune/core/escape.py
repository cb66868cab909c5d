"""Untrusted text on its way out: one escaping function for every renderer (issue 44).

Labels, study names, engine log lines, error messages and stored reports (``report --from-json``) are text other
people and programs wrote. Written raw to a terminal, an escape sequence in one of them clears the screen, moves
the cursor to forge a line, sets the window title or, on some terminals, answers back as typed input; a right-to-
left override makes ``x1.05`` read as something else. :func:`escape_text` writes every such character as a
visible escape (``\\x1b``, ``\\u202e``), and the renderers use it at their output boundary:

- the terminal: ``cli._main`` wraps stdout and stderr in :class:`EscapingStream` for the whole command, so every
  line a command prints (its report, its one-line errors, warnings) passes through it; the progress printer
  escapes its lines the same way and hands only its bar (``\\r`` redraws) the raw stream;
- MLflow: run names, parameters, tags and text artifacts (``observers/mlflow/_session.py``);
- plots: titles and labels (``report/plots.py``), where matplotlib would also read ``$...$`` as mathtext.

Newlines and tabs are kept (a report has lines); a lone ``\\r`` is not (it would let a label overwrite the line
it is on).
"""

from __future__ import annotations

import io
import re
from typing import IO, Any

__all__ = ["EscapingStream", "escape_text", "plot_text", "raw_stream"]

#: C0 controls but newline and tab, DEL, C1 controls; the Unicode controls that reorder or hide what is shown
#: (bidi embeddings, overrides and isolates, the line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: str, keep_tabs: bool = True) -> str:
    """``text`` with every control character but ``\\n`` (and ``\\t``, unless ``keep_tabs`` is false) written as a
    visible escape: ``"a\\x1b[2Jb"`` becomes ``a\\x1b[2Jb`` with a literal backslash, which no terminal acts on."""
    text = str(text)
    out = _UNSAFE.sub(_visible, text)
    return out if keep_tabs else out.replace("\t", "\\x09")


def plot_text(text: str) -> str:
    """``text`` for a matplotlib title or label: escaped, and ``$`` taken literally (not as mathtext, which a
    label such as ``$\\frac`` would otherwise make fail the whole plot)."""
    return escape_text(text).replace("$", r"\$")


class EscapingStream(io.TextIOBase):
    """A text stream that writes through :func:`escape_text` to ``raw`` (``raw`` stays reachable for a progress
    bar's own redraws, :func:`raw_stream`)."""

    def __init__(self, raw: IO[str]) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(escape_text(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return bool(getattr(self.raw, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    # typeshed declares TextIOBase.encoding a writable attribute; at run time it is a read-only property, as here.
    @property
    def encoding(self) -> Any:  # type: ignore[override]
        return getattr(self.raw, "encoding", "utf-8")

    def getvalue(self) -> str:
        """What a ``StringIO`` underneath holds (tests read a command's output so)."""
        getvalue = getattr(self.raw, "getvalue", None)  # a StringIO's (or a stream like it), not every IO's
        if getvalue is None:
            raise AttributeError(f"{type(self.raw).__name__!r} object has no attribute 'getvalue'")
        return str(getvalue())


def raw_stream(stream: IO[str]) -> IO[str]:
    """The stream under an :class:`EscapingStream` (for a progress bar's ``\\r`` redraws: no untrusted text in
    them), else ``stream`` itself."""
    while isinstance(stream, EscapingStream):
        stream = stream.raw
    return stream
