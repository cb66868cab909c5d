"""Running the runner in a container: placeholders in ``engine.launcher`` and ``engine.env``, and the image's digest.

A container launcher is ``engine.launcher``: a command prefix ending in an interpreter (``[docker, run, ...,
--entrypoint, python3, "{image}"]``), to which the engine appends the runner's path. The runner and the study's
caches live on the host, so the launcher mounts them at the *same* paths inside the container, and every path
autotune hands the runner (``VLLM_CACHE_ROOT``, the logs, a local model) holds on both sides. The placeholders
say where those are, and are filled in at each launch:

``{workdir}``     the directory that holds the study directories (``--workdir``): the model cache lives here, so
                  studies share one download
``{study_dir}``   this study's directory: its compile caches (vLLM, Triton, FlashInfer, Inductor) and logs
``{runner_dir}``  the directory of autotune's runner scripts (mount it read-only)
``{image}``       ``engine.image``, the container image; its digest is recorded in the study
``{uid}``, ``{gid}``  this process's user and group, so that what the container writes stays the user's

An unknown ``{name}`` is refused when the engine is made, naming the field and the placeholders there are.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.engines._errors import EngineError

__all__ = ["PLACEHOLDERS", "check_placeholders", "check_runtime", "image_facts", "placeholder_values", "render"]

PLACEHOLDERS = ("workdir", "study_dir", "runner_dir", "image", "uid", "gid")
#: ``{name}``, but not the ``${NAME}`` of a reference to the environment (:mod:`autotune.core.secrets`).
_PATTERN = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_INSPECT_TIMEOUT_S = 60.0


def check_placeholders(text: str, field: str, *, image: str | None) -> None:
    """Every ``{name}`` in ``text`` is a known placeholder, and ``{image}`` only with ``engine.image`` set.

    Raises:
        ValueError: one line naming ``field`` and the placeholders there are.
    """
    for name in _PATTERN.findall(text):
        if name not in PLACEHOLDERS:
            raise ValueError(f"{field}: unknown placeholder {{{name}}}; use "
                              f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        if name == "image" and not image:
            raise ValueError(f"{field} uses {{image}} but engine.vllm.image is not set; set engine.vllm.image "
                              "to the container image, e.g. nvcr.io/nvidia/vllm:25.11-py3")


def placeholder_values(study_dir: Path, *, in_workdir: bool, image: str | None, runner_dir: Path) -> dict[str, str]:
    """The placeholders' values for an engine whose directory is ``study_dir``; ``in_workdir``: it is a study's
    directory under ``--workdir`` (else a scratch directory, which is its own workdir)."""
    study_dir = study_dir.resolve()
    return {"workdir": str(study_dir.parent if in_workdir else study_dir), "study_dir": str(study_dir),
            "runner_dir": str(runner_dir), "image": image or "", "uid": str(os.getuid()), "gid": str(os.getgid())}


def render(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each known placeholder replaced (unknown ones were refused by :func:`check_placeholders`)."""
    return _PATTERN.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def check_runtime(launcher: Sequence[str]) -> None:
    """The launcher's program is on ``PATH`` (or is a path that exists), before anything starts.

    Raises:
        EngineError: one line naming the program and the fix.
    """
    program = launcher[0]
    if shutil.which(program) is None:
        raise EngineError(f"vllm engine: engine.launcher: {program!r} is not on PATH; install it (for a container "
                          "launcher: Docker with the NVIDIA Container Toolkit), or set engine.python to an "
                          "interpreter that has vLLM instead of engine.launcher")


def image_facts(runtime: str, image: str) -> dict[str, Any]:
    """``image``, its local id (``sha256:...``: changes with any change to the image) and its registry digest
    (``name@sha256:...``, when it was pulled from a registry), read with ``RUNTIME image inspect`` (Docker and
    Podman answer the same JSON).

    Raises:
        EngineError: the runtime cannot say (the image is not there), naming the fix.
    """
    try:
        done = subprocess.run([runtime, "image", "inspect", image], capture_output=True, text=True,
                              timeout=_INSPECT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        data = None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) or not data[0].get("Id"):
        raise EngineError(f"vllm engine: engine.image: {runtime} image inspect {image} gave no image id; pull it "
                          f"first ({runtime} pull {image}) so the study can record which image it measured")
    digests = [d for d in data[0].get("RepoDigests") or () if isinstance(d, str)]
    facts: dict[str, Any] = {"image": image, "image_id": str(data[0]["Id"])}
    if digests:
        facts["image_digest"] = sorted(digests)[0]
    return facts
