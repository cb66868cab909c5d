"""Redaction: no credential autotune is given is ever stored or printed.

Engines need their credentials (``engine_args: {hf_token: ...}``, ``--tracking-uri http://user:pw@host``,
``--storage postgresql://user:pw@host/db``), so the configuration an engine runs keeps them. Everything autotune
*writes* - Optuna user attributes, MLflow params, tags and artifacts, reports, exports, the recorded command line -
goes through this module first:

* a mapping value whose key names a credential (:func:`is_secret_key`: ``token``, ``api_key``, ``secret``,
  ``password``, ...) becomes :data:`REDACTED`;
* the password of a URI with ``user:password@`` becomes ``***`` (SQLAlchemy's own rendering of a hidden password);
* free text (logs, YAML, command lines) loses ``key=value`` / ``key: value`` pairs with a credential key and
  well-known token shapes (Hugging Face ``hf_...``, OpenAI ``sk-...``, GitHub ``ghp_...``, AWS ``AKIA...``).

Redaction is one-way: a redacted value cannot be given back. So a credential an engine needs is written as a
*reference* to the environment variable that holds it (:data:`REFERENCE`, ``hf_token: ${HF_TOKEN}``), which every
rule above lets through unchanged and :mod:`autotune.core.secrets` resolves only when an engine starts: the stored
study keeps the reference, and ``recheck``, ``worker`` and ``export`` get it back. A value a reference resolved to
is remembered (:func:`remember_secret`) and replaced by its reference wherever it appears in anything written
afterwards, whatever its shape (a log line that echoes it, an error quoting it). A literal credential where the
rules above would hide one is refused at input (:func:`autotune.core.secrets.literal_secret`), so what these rules
hide in a study's own values is only ever ``<redacted>`` left by an older autotune.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "REDACTED",
    "REFERENCE",
    "forget_secrets",
    "has_reference",
    "is_secret_key",
    "redact",
    "redact_command",
    "redact_text",
    "redact_uri",
    "redacted_fields",
    "remember_secret",
]

#: What a credential is replaced with (a plain string, so YAML, JSON and MLflow params keep their shape).
REDACTED = "<redacted>"
#: A credential key's last word (``hf_token``, ``db-password``, ``client_secret``).
_SECRET_LAST_WORDS = frozenset({"token", "secret", "password", "passwd", "pwd", "passphrase", "credential",
                                "credentials", "apikey", "auth", "authorization", "cookie"})
#: ``<word>_key`` pairs that are credentials; ``config_key`` or ``cache_key`` are not.
_SECRET_KEY_PREFIXES = frozenset({"api", "access", "secret", "private", "auth", "signing", "encryption", "client",
                                  "account", "master", "license", "subscription"})
_WORD = re.compile(r"[A-Za-z0-9]+")
#: A reference to an environment variable, ``${NAME}``: what a credential is written as (resolved when an engine
#: starts, :mod:`autotune.core.secrets`). It is kept by every rule here: it names where the value is, not the value.
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Resolved values shorter than this are not replaced by value (a 3-character value would cut ordinary words out of
#: every log); the key, flag and shape rules still apply to them.
MIN_REMEMBERED = 4
#: Values references resolved to in this process -> the reference each came from (``${HF_TOKEN}``).
_known: dict[str, str] = {}
_known_lock = threading.Lock()
# Every pattern below runs in time linear in the text (a cmd engine may write one 5 MB line to stderr; see
# ``python -m autotune.bench.redaction``). Two rules keep it so:
# * a match may only *start* where a run of its name characters starts (a lookbehind refuses every later position
#   of the run), so a long run is scanned once rather than once per character;
# * a run is consumed possessively (``*+``): the character after it must be a separator the run cannot contain,
#   so giving characters back could never make a match, only cost time.
# Within a run a key or scheme still starts at its first letter (``[0-9.-]*+`` steps over a leading ``--`` or
# digits), which is where the leftmost match of the plain pattern would have started; a ``--flag`` starts a word.
#: scheme://user:password@ - the password part, whatever the scheme (http, postgresql+psycopg, redis, ...).
_URI_PASSWORD = re.compile(r"(?P<head>(?<![A-Za-z0-9+.-])[0-9+.-]*+[A-Za-z][A-Za-z0-9+.-]*+://[^\s/@:]*+:)"
                           r"(?P<pw>[^\s/@]++)(?P<at>@)")
#: Token shapes that are credentials wherever they appear.
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}+|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}+|github_pat_[A-Za-z0-9_]{20,}+"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b")
#: ``key=value``, ``key: value``, ``"key": "value"`` (JSON, Python reprs, YAML) with any key. Key and value are on one
#: line, as is a flag and its value below: across a line break the "value" is the next line's start - a YAML list's
#: ``-`` under ``- --api-key`` - and hiding it broke a stored space file (issue 44).
_PAIR = re.compile(r"""(?:(?P<q>["'])|(?<![A-Za-z0-9_.-])[0-9.-]*+)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*+)(?(q)(?P=q))"""
                   r"""(?P<sep>[ \t]*+[:=][ \t]*+)(?P<value>"[^"\n]*+"|'[^'\n]*+'"""
                   r"""|\$\{[A-Za-z_][A-Za-z0-9_]*+\}[^\s,;}\])"'#]*+|[^\s,;}\])"'#]++)""")
#: ``--flag VALUE`` on a command line.
_FLAG = re.compile(r"""(?P<flag>(?<![\w.-])--?[A-Za-z][A-Za-z0-9_.-]*+)(?P<sep>[ \t]++)"""
                   r"""(?P<value>"[^"\n]*+"|'[^'\n]*+'|[^\s"']++)""")


def is_secret_key(key: Any) -> bool:
    """Whether a mapping key or option name names a credential (``hf_token``, ``api-key``, ``DB_PASSWORD``)."""
    return _is_secret_name(str(key))


def _is_secret_name(key: str) -> bool:
    # A long log names the same few keys thousands of times; a key of megabytes is not worth keeping in a cache.
    return _is_secret_short_name(key) if len(key) <= 200 else _is_secret_words(key)


@functools.lru_cache(maxsize=4096)
def _is_secret_short_name(key: str) -> bool:
    return _is_secret_words(key)


def _is_secret_words(key: str) -> bool:
    words = [w.lower() for w in _WORD.findall(key)]
    if not words:
        return False
    if words[-1] in _SECRET_LAST_WORDS or "password" in words or "secret" in words:
        return True
    if words[-1] == "key" and len(words) > 1:
        return words[-2] in _SECRET_KEY_PREFIXES
    return False


def has_reference(value: Any) -> bool:
    """Whether ``value`` is a string holding a ``${NAME}`` reference (:data:`REFERENCE`)."""
    return isinstance(value, str) and "${" in value and REFERENCE.search(value) is not None


def remember_secret(value: str, reference: str) -> None:
    """From now on, ``value`` (what ``reference`` resolved to) is written as ``reference`` wherever it appears in
    text this module redacts, in this process. Values shorter than :data:`MIN_REMEMBERED` are not remembered."""
    if isinstance(value, str) and len(value) >= MIN_REMEMBERED:
        with _known_lock:
            _known.setdefault(value, reference)


def forget_secrets() -> None:
    """Forget every remembered value (a test's fresh start)."""
    with _known_lock:
        _known.clear()


def _hide_known(text: str) -> str:
    """``text`` with every remembered value replaced by its reference, the longest first (one value may hold
    another)."""
    if not _known:
        return text
    with _known_lock:
        known = sorted(_known.items(), key=lambda kv: -len(kv[0]))
    for value, reference in known:
        if value in text:
            text = text.replace(value, reference)
    return text


def redact_uri(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://user:***@host`` (every URI in ``text``); a password written as
    a reference (``user:${DB_PASSWORD}@host``) is kept."""
    return _URI_PASSWORD.sub(lambda m: m[0] if has_reference(m["pw"]) else f"{m['head']}***{m['at']}", text)


def redact_text(text: str) -> str:
    """Free text (a log, a YAML file, a command line) with URI passwords, credential pairs and token shapes removed."""
    if not text:
        return text
    text = _TOKEN_SHAPES.sub(REDACTED, redact_uri(_hide_known(text)))

    def hide(m: re.Match[str], name: str) -> str:
        value = m["value"]
        if not _is_secret_name(name) or value.strip("'\"") == REDACTED or has_reference(value):
            return m[0]
        quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 and value[-1] == value[0] else ""
        return m[0][: m.start("value") - m.start()] + f"{quote}{REDACTED}{quote}"

    text = _PAIR.sub(lambda m: hide(m, m["name"]), text)
    return _FLAG.sub(lambda m: hide(m, m["flag"].lstrip("-")), text)


def redact(value: Any, _key: Any = None) -> Any:
    """A copy of ``value`` (mappings, sequences, strings, numbers) safe to store or print.

    Values under a credential key become :data:`REDACTED` (``None``, empty values and true/false stay, so "not
    set" stays visible and ``hf_token: true``, "use the login's token", is no credential), but for a reference
    (``${HF_TOKEN}``), which is kept; strings lose remembered values, URI passwords and token shapes; everything
    else is returned unchanged.
    """
    if _key is not None and is_secret_key(_key) and value not in (None, "", {}, []) and not isinstance(value, bool):
        # Everything under a credential key is a credential, item by item, so a reference in it is kept.
        if isinstance(value, Mapping):
            return {k: redact(v, _key) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            items = [redact(v, _key) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if not (isinstance(value, str) and has_reference(text := redact_text(value))):
            return REDACTED
        return text
    if isinstance(value, Mapping):
        return {k: redact(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):
            items = redact_command(value)  # an argv: "--hf-token", "X" hides X
        else:
            items = [redact(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_command(argv: Sequence[str]) -> list[str]:
    """A command line safe to record: ``--hf-token X`` / ``--engine-opt api_key=X`` / URIs with passwords cleaned;
    a reference (``--api-key ${API_KEY}``) is kept."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            hide_next = False
            if has_reference(kept := redact_text(arg)):
                out.append(kept)
                continue
            out.append(REDACTED)
            continue
        if arg.startswith("-") and "=" not in arg and is_secret_key(arg.lstrip("-")):
            out.append(arg)
            hide_next = True
            continue
        if arg.startswith("-") and "=" in arg and is_secret_key(arg.split("=", 1)[0].lstrip("-")):
            flag, value = arg.split("=", 1)
            kept = redact_text(value)
            out.append(flag + "=" + (kept if has_reference(kept) else REDACTED))
            continue
        out.append(redact_text(arg))
    return out


def redacted_fields(value: Any, prefix: str = "") -> list[str]:
    """Dotted paths of the fields in ``value`` that hold :data:`REDACTED` (what ``export`` asks the user to fill)."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            found += redacted_fields(v, f"{prefix}{k}.")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found += redacted_fields(v, f"{prefix}{i}.")
    elif isinstance(value, str) and REDACTED in value:
        found.append(prefix.rstrip("."))
    return found
