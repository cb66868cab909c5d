"""The ``workload:`` and ``slo:`` sections of a space: prompts, sampling, load, latency limits.

A workload says what one timed pass runs::

    workload:
      dataset: prompts.jsonl            # or {format: sharegpt, path: sg.json}, {vllm: spec_bench, path: ...}, synthetic
      num_prompts: 64                   # sampled from the dataset by seed (with replacement if it is smaller)
      input_len: 256                    # synthetic prompts' length; a text prompt longer than the model allows
      output_len: 256                   #   is cut; output_len is the default for prompts that do not say
      concurrency: 8                    # or load levels, e.g. [1, 8, 32]: one engine start measures each in turn
      aggregate: min                    # levels only: min (the worst level's value) or mean
      weights: [1, 2, 1]                #   with aggregate: mean, one weight per level (default: equal)
      temperature: 0.0                  # greedy by default; top_p: 1.0
    slo: {tpot_p99_ms: 50, ttft_p99_ms: 500}

With load levels every latency limit must hold at every level (a restart's percentiles are its worst level's).

Datasets are loaded inside the engine's interpreter (the ``vllm`` engine's runner), tokenized with the model's
tokenizer, with its chat template where it has one. Without a ``dataset`` the ``vllm`` engine uses
:data:`DEFAULT_PROMPTS` for a real checkpoint and synthetic token-id prompts for dummy weights or a model without a
tokenizer (:func:`default_dataset`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from autotune.core.records import AGGREGATES, LATENCY_METRICS, LATENCY_PERCENTILES, Dataset, Workload, latency_key

__all__ = [
    "DATASET_FORMATS",
    "DEFAULT_PROMPTS",
    "SLO_KEYS",
    "VLLM_DATASETS",
    "default_dataset",
    "parse_slo",
    "parse_workload",
    "read_dataset",
    "unfit_for_serving",
]

#: The prompts file written for autotune (code, chat, summarisation, extraction, ...): the default for real models.
DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"
DATASET_FORMATS = ("synthetic", "jsonl", "sharegpt", "vllm")
#: ``vllm bench serve --dataset-name`` values of vLLM 0.32 for text generation (``vllm.benchmarks.datasets``).
VLLM_DATASETS = ("sharegpt", "burstgpt", "random", "hf", "custom", "prefix_repetition", "spec_bench", "speed_bench",
                 "timed_trace")
#: Limits a ``slo:`` section may set: every latency percentile, in milliseconds.
SLO_KEYS = tuple(latency_key(m, p) for m in LATENCY_METRICS for p in LATENCY_PERCENTILES)
_INT_KEYS = ("num_prompts", "input_len", "output_len", "concurrency", "seed", "warmup_passes", "max_warmup_passes",
             "timed_passes")
_DATASET_KEYS = ("format", "path", "vllm", "args")

Fail = Callable[[str, str, str], Exception]


def parse_workload(value: Any, fail: Fail, base_dir: Path, slo: tuple[tuple[str, float], ...] = ()) -> Workload:
    """Validate a ``workload:`` mapping. ``fail(field, problem, fix)`` builds the one-line error raised."""
    if not isinstance(value, dict):
        raise fail("workload", f"must be a mapping, got {type(value).__name__}", "write it as 'key: value' lines")
    allowed = (*_INT_KEYS, "repetitive_prompts", "dataset", "temperature", "top_p", "aggregate", "weights")
    kwargs: dict[str, Any] = {"slo": slo}
    for key, val in value.items():
        field = f"workload.{key}"
        if val is None or (key == "slo" and val == {}):
            continue  # Workload.to_dict()'s shape: an unset dataset, no limits
        if key not in allowed:
            raise fail(field, "unknown key", f"use one of: {', '.join(allowed)}")
        if key == "repetitive_prompts":
            if not isinstance(val, bool):
                raise fail(field, f"must be true or false, got {val!r}", "write true or false")
            kwargs[key] = val
        elif key == "dataset":
            kwargs[key] = parse_dataset(val, fail, base_dir)
        elif key == "temperature":
            kwargs[key] = _number(val, field, fail, 0.0, None, "a number >= 0 (0 is greedy)")
        elif key == "top_p":
            top_p = _number(val, field, fail, 0.0, 1.0, "a number in (0, 1]")
            if top_p == 0.0:
                raise fail(field, "must be above 0", "use a number in (0, 1], 1 for no nucleus cut")
            kwargs[key] = top_p
        elif key == "concurrency" and isinstance(val, list):
            kwargs[key] = _levels(val, fail)
        elif key == "aggregate":
            if val not in AGGREGATES:
                raise fail(field, f"unknown aggregate {val!r}",
                           "use min (the worst level's value) or mean (optionally with weights:)")
            kwargs[key] = val
        elif key == "weights":
            if not isinstance(val, list) or not val:
                raise fail(field, f"must be a list of numbers, one per load level, got {val!r}",
                           "write e.g. weights: [1, 2, 1]")
            kwargs[key] = tuple(_number(w, field, fail, 0.0, None, "positive numbers, one per load level")
                                for w in val)
            if min(kwargs[key]) <= 0.0:
                raise fail(field, "has a weight of 0", "give every load level a positive weight, or drop the level")
        else:
            minimum = 0 if key in ("seed", "warmup_passes") else 1
            if isinstance(val, bool) or not isinstance(val, int):
                raise fail(field, f"must be an integer, got {val!r}", f"write a whole number >= {minimum}")
            if val < minimum:
                raise fail(field, f"must be >= {minimum}, got {val}", f"use a value >= {minimum}")
            kwargs[key] = val
    workload = Workload(**kwargs)
    _check_levels(workload, fail)
    if workload.max_warmup_passes < workload.warmup_passes:
        raise fail("workload.max_warmup_passes", "is below warmup_passes", "make it >= warmup_passes")
    if "repetitive_prompts" in value and workload.dataset is not None and workload.dataset.is_text:
        raise fail("workload.repetitive_prompts", "applies to synthetic prompts only, but a text dataset is set",
                   "remove repetitive_prompts, or set dataset: synthetic")
    return workload


def _levels(value: list[Any], fail: Fail) -> tuple[int, ...]:
    field = "workload.concurrency"
    if not value:
        raise fail(field, "is an empty list", "give one number, or load levels such as [1, 8, 32]")
    for level in value:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise fail(field, f"load level {level!r} is not a whole number >= 1", "write e.g. concurrency: [1, 8, 32]")
    if len(set(value)) != len(value):
        raise fail(field, f"repeats a load level ({value})", "list each level once")
    return tuple(value)


def _check_levels(workload: Workload, fail: Fail) -> None:
    """``aggregate`` and ``weights`` go with load levels, and weights with a mean, one per level."""
    levels = workload.levels
    if len(levels) > 1 and workload.aggregate is None:
        raise fail("workload.aggregate", f"is missing: {len(levels)} load levels need a rule to make one value",
                   "add aggregate: min (the worst level's value) or aggregate: mean")
    if len(levels) == 1 and (workload.aggregate is not None or workload.weights):
        key = "aggregate" if workload.aggregate is not None else "weights"
        raise fail(f"workload.{key}", "applies to several load levels, but concurrency is one number",
                   f"remove {key}, or give load levels such as concurrency: [1, 8, 32]")
    if workload.weights and workload.aggregate != "mean":
        raise fail("workload.weights", "apply to aggregate: mean only", "set aggregate: mean, or remove weights")
    if workload.weights and len(workload.weights) != len(levels):
        raise fail("workload.weights", f"has {len(workload.weights)} weights for {len(levels)} load levels",
                   "give one weight per level, in the order of concurrency")


def parse_dataset(value: Any, fail: Fail, base_dir: Path) -> Dataset:
    """``synthetic``, a path (``.json`` is ShareGPT, anything else JSONL), or ``{format|vllm, path, args}``."""
    field = "workload.dataset"
    if isinstance(value, str):
        if value == "synthetic":
            return Dataset("synthetic")
        fmt = "sharegpt" if value.endswith(".json") else "jsonl"
        return Dataset(fmt, path=_existing(value, field, fail, base_dir))
    if not isinstance(value, dict):
        raise fail(field, f"must be a path, 'synthetic' or a mapping, got {value!r}",
                   "write e.g. dataset: prompts.jsonl or dataset: {vllm: spec_bench, path: question.jsonl}")
    for key in value:
        if key not in _DATASET_KEYS:
            raise fail(f"{field}.{key}", "unknown key", f"use one of: {', '.join(_DATASET_KEYS)}")
    if "vllm" in value:
        name = value["vllm"]
        if name not in VLLM_DATASETS:
            raise fail(f"{field}.vllm", f"unknown vLLM dataset {name!r}", f"use one of: {', '.join(VLLM_DATASETS)}")
        if value.get("format", "vllm") != "vllm":
            raise fail(f"{field}.format", "conflicts with vllm:", "remove format when naming a vLLM dataset")
        path = None if value.get("path") is None else _existing(value["path"], f"{field}.path", fail, base_dir)
        return Dataset("vllm", path=path, name=str(name), args=_args(value.get("args"), fail))
    fmt = value.get("format")
    if fmt not in ("synthetic", "jsonl", "sharegpt"):
        raise fail(f"{field}.format", f"unknown format {fmt!r}",
                   "use jsonl, sharegpt or synthetic, or name a vLLM dataset with vllm: NAME")
    if value.get("args"):
        raise fail(f"{field}.args", "only applies to vLLM datasets", "remove it, or name the dataset with vllm:")
    if fmt == "synthetic":
        return Dataset("synthetic")
    if value.get("path") is None:
        raise fail(f"{field}.path", "is missing", f"give the {fmt} file's path")
    return Dataset(fmt, path=_existing(value["path"], f"{field}.path", fail, base_dir))


def read_dataset(dataset: Dataset | None, fail: Fail, max_model_len: Any = None) -> str | None:
    """Read the dataset file at load and check every row; a digest of its prompts for the study's identity.

    The engines read the file again where they run (the ``vllm`` engine in its own interpreter), and the ``sim``
    engine never reads it at all: checking it here is what stops a bad row before any engine starts, whichever
    engine runs. A bad row is refused with ``file:line``, never skipped or filled in with a default.

    Returns:
        A digest of the prompts and their output lengths (JSONL), or of the file (ShareGPT, a vLLM dataset's
        file); ``None`` when the prompts are not read from a file (synthetic, a vLLM dataset by name).
    """
    if dataset is None or dataset.path is None or dataset.source == "synthetic":
        return None
    field = "workload.dataset"
    limit = max_model_len if isinstance(max_model_len, int) and not isinstance(max_model_len, bool) else None
    if dataset.source == "jsonl":
        return _digest(_jsonl_rows(dataset.path, field, fail, limit))
    try:
        body = Path(dataset.path).read_bytes()
    except OSError as exc:
        raise fail(field, f"cannot read {dataset.path}: {exc.strerror or exc}", "give a readable file") from None
    if dataset.source == "sharegpt":
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise fail(field, f"{dataset.path}: not a ShareGPT JSON file ({exc})",
                       "give a JSON list of {conversations: [...]} objects, or a .jsonl file of prompts") from None
        if not isinstance(data, list):
            raise fail(field, f"{dataset.path}: a ShareGPT file is a JSON list, got {type(data).__name__}",
                       "give a JSON list of {conversations: [...]} objects")
    return hashlib.sha256(body).hexdigest()[:16]


def _jsonl_rows(path: str, field: str, fail: Fail, max_model_len: int | None) -> list[Any]:
    """Every row of a JSONL prompts file as ``[prompt or messages, output_len or None]``, each checked."""
    rows: list[Any] = []
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below; a decode error names the line
    except OSError as exc:
        raise fail(field, f"cannot read {path}: {exc.strerror or exc}", "give a readable file") from None
    fix = "correct or remove that row (a bad row is never skipped or filled in)"
    with fh:
        number = 0
        try:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise fail(field, f"{path}:{number}: not JSON ({getattr(exc, 'msg', exc)})", fix) from None
                if not isinstance(row, dict):
                    raise fail(field, f"{path}:{number}: must be a JSON object like {{\"prompt\": \"...\"}}", fix)
                rows.append([_row_prompt(row, path, number, field, fail, fix),
                             _row_output_len(row, path, number, field, fail, max_model_len)])
        except UnicodeDecodeError:
            raise fail(field, f"{path}:{number + 1}: not UTF-8 text", "save the file as UTF-8") from None
    if not rows:
        raise fail(field, f"{path}: has no prompts", "add one JSON object a line, e.g. {\"prompt\": \"...\"}")
    return rows


def _row_prompt(row: dict[str, Any], path: str, number: int, field: str, fail: Fail, fix: str) -> Any:
    if "messages" in row:
        messages = row["messages"]
        if (not isinstance(messages, list) or not messages
                or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)):
            raise fail(field, f"{path}:{number}: 'messages' must be a non-empty list of {{role, content}} objects "
                       f"with text content, got {_brief(messages)}", fix)
        return messages
    if "prompt" not in row:
        raise fail(field, f"{path}:{number}: needs a 'prompt' text or a 'messages' list", fix)
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        # A null prompt would reach the engine as the text "None".
        raise fail(field, f"{path}:{number}: 'prompt' must be a non-empty text, got {_brief(prompt)}", fix)
    return prompt


def _row_output_len(row: dict[str, Any], path: str, number: int, field: str, fail: Fail,
                    max_model_len: int | None) -> int | None:
    if "output_len" not in row:
        return None  # the workload's output_len
    out = row["output_len"]
    if isinstance(out, bool) or not isinstance(out, int) or out < 1:
        raise fail(field, f"{path}:{number}: 'output_len' must be a whole number >= 1, got {_brief(out)}",
                   "correct the row, or drop its output_len to use the workload's (a bad row is never filled in)")
    if max_model_len is not None and out >= max_model_len:
        raise fail(field, f"{path}:{number}: 'output_len' {out} leaves no room for the prompt within "
                   f"engine_args.max_model_len={max_model_len}",
                   f"use an output_len below {max_model_len} in that row, or raise engine_args.max_model_len")
    return out


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _digest(value: Any) -> str:
    body = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def parse_slo(value: Any, fail: Fail) -> tuple[tuple[str, float], ...]:
    """Validate a ``slo:`` mapping of latency limits in milliseconds, e.g. ``{tpot_p99_ms: 50}``."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not value:
        raise fail("slo", "must be a non-empty mapping of limits", "write e.g. slo: {tpot_p99_ms: 50, ttft_p99_ms: 500}")
    out = []
    for key, val in value.items():
        if key not in SLO_KEYS:
            hint = _closest(str(key))
            raise fail(f"slo.{key}", "unknown latency limit",
                       f"use METRIC_pP_ms with METRIC in {', '.join(LATENCY_METRICS)} and P in "
                       f"{', '.join(map(str, LATENCY_PERCENTILES))}" + (f" (did you mean {hint}?)" if hint else ""))
        ms = _number(val, f"slo.{key}", fail, 0.0, None, "a positive number of milliseconds")
        if ms == 0.0:
            raise fail(f"slo.{key}", "must be above 0 ms", "give a positive number of milliseconds")
        out.append((str(key), ms))
    return tuple(sorted(out))


def default_dataset(engine_args: Mapping[str, Any]) -> Dataset:
    """What the ``vllm`` engine runs without a ``dataset``: shipped text prompts, unless the model cannot read them.

    Dummy weights produce noise whatever the prompt and a model without a tokenizer cannot tokenize text, so those
    get synthetic token ids (the report then says the study ran synthetic prompts).
    """
    if engine_args.get("load_format") == "dummy" or engine_args.get("skip_tokenizer_init"):
        return Dataset("synthetic")
    return Dataset("jsonl", path=str(DEFAULT_PROMPTS))


def unfit_for_serving(llm_kwargs: Mapping[str, Any]) -> list[str]:
    """Settings that make a configuration fit for a test but not for serving, each with why (for export)."""
    out = []
    if llm_kwargs.get("load_format") == "dummy":
        out.append("load_format: dummy (random weights: the model produces noise)")
    if llm_kwargs.get("skip_tokenizer_init"):
        out.append("skip_tokenizer_init: true (no tokenizer: the server cannot read text prompts)")
    spec = llm_kwargs.get("speculative_config") or {}
    if spec.get("rejection_sample_method") == "synthetic" or spec.get("synthetic_acceptance_rates"):
        out.append("synthetic acceptance (speculative_config.synthetic_acceptance_rates / rejection_sample_method: "
                   "synthetic: drafts are accepted at a made-up rate, whatever the model says)")
    return out


def _number(value: Any, field: str, fail: Fail, low: float, high: float | None, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(field, f"must be a number, got {value!r}", f"write {what}")
    if not math.isfinite(value):
        # NaN passes every comparison below and poisons every mean, limit and verdict computed from it.
        raise fail(field, f"must be a finite number, got {value!r}", f"write {what}")
    if value < low or (high is not None and value > high):
        raise fail(field, f"is out of range ({value})", f"write {what}")
    return float(value)


def _existing(path: Any, field: str, fail: Fail, base_dir: Path) -> str:
    if not isinstance(path, str) or not path:
        raise fail(field, f"must be a file path, got {path!r}", "give the dataset file's path")
    candidates = [Path(path).expanduser()]
    if not candidates[0].is_absolute():
        # Relative to the working directory (as model paths are), else to the space file.
        candidates.append(base_dir / path)
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.resolve())
    raise fail(field, f"file {path!r} does not exist",
               "give an existing file (relative paths: to the working directory or the space file)")


def _args(value: Any, fail: Fail) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise fail("workload.dataset.args", "must be a mapping", "write e.g. args: {spec_bench_output_len: 256}")
    out = []
    for key, val in value.items():
        if not isinstance(val, (str, int, float, bool)):
            raise fail(f"workload.dataset.args.{key}", f"must be a string or number, got {val!r}",
                       "give one value (vllm bench serve's --" + str(key).replace("_", "-") + ")")
        out.append((str(key).replace("-", "_"), val))
    return tuple(sorted(out))


def _closest(key: str) -> str | None:
    match = re.match(r"^(ttft|tpot|itl|e2el|e2e)[_-]?p?(\d+)", key)
    if not match:
        return None
    metric = "e2el" if match.group(1) == "e2e" else match.group(1)
    pct = int(match.group(2))
    return latency_key(metric, pct) if pct in LATENCY_PERCENTILES else None

