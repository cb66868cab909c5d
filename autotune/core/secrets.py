"""Secrets are referenced, never stored: ``${NAME}`` names the environment variable a credential comes from.

A credential an engine needs (``engine_args: {hf_token: ...}``, ``--api-key`` on a cmd engine's command line, a
token in ``engine.vllm.env``) is written as a reference, ``${HF_TOKEN}``, anywhere in a string of a space file or
an engine option (``--api-key ${API_KEY}``, ``Bearer ${TOKEN}``, ``postgresql://bob:${DB_PASSWORD}@db/x``):

* the space, the study, MLflow, reports and exports keep the reference (every redaction rule of
  :mod:`autotune.core.redact` lets it through), so ``recheck`` and ``worker``, which rebuild the engine from the
  stored space, run with the credential, and ``export`` writes the reference;
* it is resolved from the environment of the autotune process only when an engine is started (:func:`resolve`,
  :func:`resolve_config`), and each value it resolved to is remembered (:func:`~autotune.core.redact.remember_secret`):
  written anywhere afterwards (an engine log echoing it, an error quoting it) it is replaced by its reference;
* a variable that is not set is one line naming it and the field (:func:`unresolvable`, :class:`MissingSecret`),
  before an engine starts;
* a *literal* credential - a value the redaction rules would hide: a credential key's value (``hf_token: hf_...``),
  a credential flag's value (``--api-key X``, ``--api-key=X``, ``api_key=X``), a URI password, a token shape
  anywhere - is refused at input in one line naming the field and the fix (:func:`literal_secret`): stored, it
  could only be stored redacted, and a study that cannot give its credential back cannot be rechecked.
  ``<redacted>`` (what an older autotune stored) is no literal: it loads, and is refused only when an engine
  would be started with it (:func:`unresolvable`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from autotune.core.redact import (REDACTED, REFERENCE, has_reference, is_secret_key, redact, redact_command,
                                  remember_secret)

__all__ = ["MissingSecret", "literal_secret", "literal_secret_line", "references", "resolve", "resolve_config",
           "resolve_workload", "unresolvable"]


class MissingSecret(ValueError):
    """A reference cannot be resolved: its variable is not set, or the value is ``<redacted>`` (one line)."""


def _env_name(field: str) -> str:
    """A variable name for the fix: the field's last word, ``engine_args.hf_token`` -> ``HF_TOKEN``."""
    last = re.split(r"[.\[\]]", field.rstrip("]"))[-1] if field else ""
    name = re.sub(r"[^A-Za-z0-9]+", "_", last.lstrip("-")).strip("_").upper()
    return name if name and not name[0].isdigit() else "SECRET"


def literal_secret(value: Any, field: str, key: Any = None) -> tuple[str, str, str] | None:
    """``(field, problem, fix)`` of the first literal credential in ``value`` (a mapping, list, string), or
    ``None``; ``f"{field}: {problem}; fix: {fix}"`` is the one line to print.

    A literal credential is a value the redaction rules (:func:`~autotune.core.redact.redact`) would change: they
    hide credentials, and keep references, ``<redacted>``, unset values and true/false. The line names the field
    (``field`` plus the path inside ``value``) and the fix, never the value.
    """
    where = _literal_at(value, field, key)
    if where is None:
        return None
    field, flag, leaf = where
    var = _env_name(flag or field)
    if flag.startswith("-"):
        example = f"{flag} ${{{var}}}"
    elif not flag and _URI_PASSWORD.search(leaf):
        var = "PASSWORD"
        example = f"scheme://user:${{{var}}}@host"
    else:
        example = f"${{{var}}}"
    return (field, "holds a literal credential (autotune stores none: a stored study could not give it back to "
                   "recheck or worker)",
            f"write the environment variable that holds it, e.g. {example}, and export {var}")


def literal_secret_line(value: Any, field: str, key: Any = None) -> str | None:
    """:func:`literal_secret` as its one line, or ``None``."""
    found = literal_secret(value, field, key)
    return None if found is None else f"{found[0]}: {found[1]}; fix: {found[2]}"


def _literal_at(value: Any, field: str, key: Any) -> tuple[str, str, str] | None:
    """``(dotted field, the key or flag that makes it a credential or "", the value as text)`` of the first literal
    credential."""
    if key is not None and is_secret_key(key) and isinstance(value, (Mapping, list, tuple)):
        # Everything under a credential key is a credential (``credentials: {user: u, pass: p}``, a list of keys).
        return _first_literal_leaf(value, field, str(key))
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _literal_at(v, f"{field}.{k}" if field else str(k), k)
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, str) for v in value):  # an argv: "--api-key", "X" is a credential pair
            hidden = redact_command(list(value))
            for i, (given, kept) in enumerate(zip(value, hidden)):
                if given != kept:
                    if given.startswith("-") and "=" in given:  # --api-key=X
                        flag = given.split("=", 1)[0]
                    elif i and value[i - 1].startswith("-"):  # --api-key X
                        flag = value[i - 1]
                    else:  # a token shape, a URI password, api_key=X
                        flag = _credential_flag(given)
                    return f"{field}[{i}]", flag, given
            return None
        for i, v in enumerate(value):
            found = _literal_at(v, f"{field}[{i}]", None)
            if found is not None:
                return found
        return None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and not (key is not None and is_secret_key(key)):
        return None  # a number is no credential unless its key says so (NaN is not even equal to itself)
    if redact(value, key) != value:
        flag = _credential_flag(value) if isinstance(value, str) else ""
        return field, flag or (str(key) if key is not None and is_secret_key(key) else ""), str(value)
    return None


def _first_literal_leaf(value: Any, field: str, key: str) -> tuple[str, str, str] | None:
    if isinstance(value, Mapping):
        items: Any = [(f"{field}.{k}", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(f"{field}[{i}]", v) for i, v in enumerate(value)]
    elif value in (None, "") or isinstance(value, bool) or has_reference(value) or value == REDACTED:
        return None
    else:
        return field, key, str(value)
    for sub_field, item in items:
        found = _first_literal_leaf(item, sub_field, key)
        if found is not None:
            return found
    return None


_URI_PASSWORD = re.compile(r"://[^\s/@:]*:[^\s/@]+@")
_FLAG_NAME = re.compile(r"(?<![\w.-])(--?[A-Za-z][A-Za-z0-9_.-]*)[\s=]")


def _credential_flag(text: str) -> str:
    """The first credential flag in a command written as one string (``... --api-key X``), else ``""``."""
    return next((m[1] for m in _FLAG_NAME.finditer(text) if is_secret_key(m[1].lstrip("-"))), "")


def references(value: Any) -> list[str]:
    """The variables ``value`` references (``${NAME}``), in order, once each."""
    found: list[str] = []
    for text in _strings(value):
        found += [n for n in REFERENCE.findall(text) if n not in found]
    return found


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def unresolvable(value: Any, field: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``value`` cannot be handed to an engine, as one line naming the field, or ``None``: a reference whose
    variable is not set, or ``<redacted>`` (a credential an older autotune stored with no way back)."""
    env = os.environ if env is None else env
    return _unresolvable(value, field, env)


def _unresolvable(value: Any, field: str, env: Mapping[str, str]) -> str | None:
    if isinstance(value, Mapping):
        items: Any = [(f"{field}.{k}" if field else str(k), v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)):
        items = [(f"{field}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, str):
        missing = next((n for n in REFERENCE.findall(value) if n not in env), None)
        if missing is not None:
            return (f"{field}: ${{{missing}}} is not set in the environment; fix: export {missing} (the study stores "
                    "only the reference) and run again")
        if REDACTED in value:
            return (f"{field} is {REDACTED}: an older autotune stored the credential redacted, with no way back; fix: "
                    f"write it as a reference such as ${{{_env_name(field)}}} in the space file and give that file "
                    "(recheck --space FILE, or tune --space FILE for a new study)")
        return None
    else:
        return None
    for sub_field, item in items:
        problem = _unresolvable(item, sub_field, env)
        if problem is not None:
            return problem
    return None


def resolve(value: Any, field: str, env: Mapping[str, str] | None = None) -> Any:
    """A copy of ``value`` with every ``${NAME}`` replaced by the variable's value (each value remembered for
    redaction), for the engine that is being started. Anything without a reference is returned as it is.

    Raises:
        MissingSecret: a variable is not set, or a value is ``<redacted>`` (the line names the field).
    """
    env = os.environ if env is None else env
    problem = _unresolvable(value, field, env)
    if problem is not None:
        raise MissingSecret(problem)
    return _resolve(value, env)


def _resolve(value: Any, env: Mapping[str, str]) -> Any:
    if has_reference(value):
        def value_of(m: re.Match[str]) -> str:
            remember_secret(env[m[1]], m[0])
            return env[m[1]]

        return REFERENCE.sub(value_of, value)
    if isinstance(value, Mapping):
        return {k: _resolve(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, env) for v in value]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    return value


def resolve_config(config: Any, env: Mapping[str, str] | None = None) -> Any:
    """An :class:`~autotune.core.records.EngineConfig` with the references of its engine arguments and its
    speculative config resolved (:func:`resolve`): what the engine is started with, never what is stored. The
    configuration itself when it holds no reference."""
    env = os.environ if env is None else env
    for field, part in (("engine_args", config.engine_args), ("speculative_config", config.speculative_config)):
        problem = _unresolvable(part, field, env)
        if problem is not None:
            raise MissingSecret(problem)
    if not references([config.engine_args, config.speculative_config]):
        return config
    return dataclasses.replace(
        config, engine_args=resolve(dict(config.engine_args), "engine_args", env),
        speculative_config=None if config.speculative_config is None else resolve(
            dict(config.speculative_config), "speculative_config", env))


def resolve_workload(workload: Any, env: Mapping[str, str] | None = None) -> Any:
    """A :class:`~autotune.core.records.Workload` with the references of its dataset options resolved (a vLLM
    dataset read from a gated hub repository: ``args: {hf_token: ${HF_TOKEN}}``), as :func:`resolve_config`."""
    dataset = getattr(workload, "dataset", None)
    args = dict(getattr(dataset, "args", None) or ())
    if dataset is None or not references(args):
        return workload
    resolved = resolve(args, "workload.dataset.args", env)
    return dataclasses.replace(workload, dataset=dataclasses.replace(dataset, args=tuple(resolved.items())))
