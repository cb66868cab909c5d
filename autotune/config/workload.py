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
      pass_seconds: 5                   # a timed pass repeats the prompts in whole rounds to last about this
    slo: {tpot_p99_ms: 50, ttft_p99_ms: 500}

With load levels every latency limit must hold at every level (a restart's percentiles are its worst level's).

Datasets are loaded inside the engine's interpreter (the ``vllm`` engine's runner), tokenized with the model's
tokenizer, with its chat template where it has one. Without a ``dataset`` the ``vllm`` engine uses
:data:`DEFAULT_PROMPTS` for a real checkpoint and synthetic token-id prompts for dummy weights or a model without a
tokenizer (:func:`default_dataset`).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.inputs import InputFileError, open_input, parse_json, read_input
from autotune.core.records import LATENCY_METRICS, LATENCY_PERCENTILES, Dataset, Workload, latency_key

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

if TYPE_CHECKING:  # the engines import this module: it needs no pydantic at run time
    from autotune.config._models import DatasetSpec, WorkloadSpec

Fail = Callable[[str, str, str], Exception]
#: What a dataset file can be, for the fix of every refused one.
SUPPORTED = ("use a format autotune reads: jsonl (one {\"prompt\": ...} or {\"messages\": [...]} object a line), "
             "sharegpt (a .json list of {conversations: [...]}), or a vLLM dataset (dataset: {vllm: NAME, path: FILE})")


def parse_workload(spec: WorkloadSpec, fail: Fail, base_dir: Path, slo: tuple[tuple[str, float], ...] = ()) -> Workload:
    """The :class:`Workload` of a validated ``workload:`` section (:class:`~autotune.config._models.WorkloadSpec`:
    its keys, types, defaults and the rules between its keys); what needs the file system or the built dataset is
    checked here. ``fail(field, problem, fix)`` builds the one-line error raised."""
    dataset = None if spec.dataset is None else parse_dataset(spec.dataset, fail, base_dir)
    if "repetitive_prompts" in spec.model_fields_set and dataset is not None and dataset.is_text:
        raise fail("workload.repetitive_prompts", "applies to synthetic prompts only, but a text dataset is set",
                   "remove repetitive_prompts, or set dataset: synthetic")
    return Workload(
        num_prompts=spec.num_prompts, input_len=spec.input_len, output_len=spec.output_len,
        concurrency=tuple(spec.levels), seed=spec.seed, warmup_passes=spec.warmup_passes,
        max_warmup_passes=spec.max_warmup_passes, timed_passes=spec.timed_passes, pass_seconds=spec.pass_seconds,
        repetitive_prompts=spec.repetitive_prompts, dataset=dataset, temperature=spec.temperature, top_p=spec.top_p,
        slo=slo, aggregate=spec.aggregate, weights=tuple(spec.weights or ()))


def parse_dataset(value: str | DatasetSpec, fail: Fail, base_dir: Path) -> Dataset:
    """``synthetic``, a path (``.json`` is ShareGPT, anything else JSONL), or ``{format|vllm, path, args}``."""
    field = "workload.dataset"
    if isinstance(value, str):
        if value == "synthetic":
            return Dataset("synthetic")
        by_suffix = "sharegpt" if value.endswith(".json") else "jsonl"
        return Dataset(by_suffix, path=_existing(value, field, fail, base_dir))
    if "vllm" in value.model_fields_set:
        if value.vllm not in VLLM_DATASETS:
            raise fail(f"{field}.vllm", f"unknown vLLM dataset {value.vllm!r}",
                       f"use one of: {', '.join(VLLM_DATASETS)}")
        if value.format not in (None, "vllm"):
            raise fail(f"{field}.format", "conflicts with vllm:", "remove format when naming a vLLM dataset")
        path = None if value.path is None else _existing(value.path, f"{field}.path", fail, base_dir)
        return Dataset("vllm", path=path, name=value.vllm, args=_args(value.args))
    fmt = value.format
    if fmt not in ("synthetic", "jsonl", "sharegpt"):
        raise fail(f"{field}.format", f"unknown format {fmt!r}",
                   "use jsonl, sharegpt or synthetic, or name a vLLM dataset with vllm: NAME")
    if value.args:
        raise fail(f"{field}.args", "only applies to vLLM datasets", "remove it, or name the dataset with vllm:")
    if fmt == "synthetic":
        return Dataset("synthetic")
    if value.path is None:
        raise fail(f"{field}.path", "is missing", f"give the {fmt} file's path")
    return Dataset(fmt, path=_existing(value.path, f"{field}.path", fail, base_dir))


#: Bytes a dataset file may have: ShareGPT's largest common file is ~650 MiB, read whole.
MAX_DATASET_BYTES = 4 * 1024 * 1024 * 1024
#: Characters one JSONL row may have: far over any model's context in text (a 10M-token context is ~40M characters).
MAX_ROW_CHARS = 64 * 1024 * 1024


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
        body = read_input(dataset.path, MAX_DATASET_BYTES)  # a FIFO or /dev/zero: one line at once, not a hang
    except InputFileError as exc:
        raise fail(field, f"{dataset.path}: {exc.problem}", exc.fix) from None
    except OSError as exc:
        raise fail(field, f"cannot read {dataset.path}: {exc.strerror or exc}", "give a readable file") from None
    if dataset.source == "sharegpt":
        try:
            data = parse_json(body)
        except ValueError as exc:
            raise fail(field, f"{dataset.path}: not a ShareGPT JSON file ({exc})",
                       "give a JSON list of {conversations: [...]} objects, or a .jsonl file of prompts") from None
        if not isinstance(data, list):
            raise fail(field, f"{dataset.path}: a ShareGPT file is a JSON list, got {type(data).__name__}", SUPPORTED)
        if not any(_conversation(row) for row in data):
            # The engine skips rows without a human turn and a reply: with none, it would fail mid-study.
            kind = " (its rows are prompts: the jsonl format, one a line)" if any(
                isinstance(row, dict) and ("prompt" in row or "messages" in row) for row in data) else ""
            raise fail(field, f"{dataset.path}: has no ShareGPT conversation (a human turn, then a reply){kind}",
                       SUPPORTED)
    return hashlib.sha256(body).hexdigest()[:16]


def _conversation(row: Any) -> bool:
    """A ShareGPT row the engine reads (``engines/vllm/_dataset.py``): a human turn with text, then a reply."""
    turns = row.get("conversations") if isinstance(row, dict) else None
    if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
        return False
    return turns[0].get("from") in ("human", "user") and bool(turns[0].get("value")) and bool(turns[1].get("value"))


def _jsonl_rows(path: str, field: str, fail: Fail, max_model_len: int | None) -> list[Any]:
    """Every row of a JSONL prompts file as ``[prompt or messages, output_len or None]``, each checked."""
    rows: list[Any] = []
    try:
        # A regular file (a FIFO would block, /dev/zero never end), read a line at a time, each line bounded.
        fh = io.TextIOWrapper(open_input(path, MAX_DATASET_BYTES), encoding="utf-8")
    except InputFileError as exc:
        raise fail(field, f"{path}: {exc.problem}", exc.fix) from None
    except OSError as exc:
        raise fail(field, f"cannot read {path}: {exc.strerror or exc}", "give a readable file") from None
    fix = "correct or remove that row (a bad row is never skipped or filled in)"
    with fh:
        number = 0
        try:
            for number, line in enumerate(iter(lambda: fh.readline(MAX_ROW_CHARS + 1), ""), 1):
                if len(line) > MAX_ROW_CHARS:
                    raise fail(field, f"{path}:{number}: the row is longer than {MAX_ROW_CHARS} characters",
                               "a prompt is at most a model's context: check the file, or split the row")
                if not line.strip():
                    continue
                try:
                    row = parse_json(line)
                except ValueError as exc:
                    if not rows and not path.endswith(".jsonl"):  # a CSV, TSV or text file: not a bad row
                        raise fail(field, f"{path}: is not a dataset format autotune reads (line {number} is not "
                                   "JSON)", SUPPORTED) from None
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
    """The ``slo:`` mapping of latency limits in milliseconds, e.g. ``{tpot_p99_ms: 50}``, sorted (the schema has
    checked the names and that each limit is a positive finite number)."""
    if value is None:
        return ()
    if not value:
        raise fail("slo", "must be a non-empty mapping of limits", "write e.g. slo: {tpot_p99_ms: 50, ttft_p99_ms: 500}")
    return tuple(sorted((str(key), float(ms)) for key, ms in value.items()))


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
        if candidate.is_dir():
            raise fail(field, f"{path!r} is a directory", f"give a dataset file inside it; {SUPPORTED}")
        if candidate.exists():  # a FIFO or a device: the reader's own line (core.inputs), not "does not exist"
            try:
                open_input(candidate, MAX_DATASET_BYTES).close()
            except InputFileError as exc:
                raise fail(field, f"{path!r} {exc.problem}", exc.fix) from None
            except OSError as exc:
                raise fail(field, f"cannot read {path!r}: {exc.strerror or exc}", "give a readable file") from None
    raise fail(field, f"file {path!r} does not exist",
               "give an existing file (relative paths: to the working directory or the space file)")


def _args(value: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """vLLM dataset options, ``-`` and ``_`` alike, sorted so the record stays hashable."""
    return tuple(sorted((str(key).replace("-", "_"), val) for key, val in (value or {}).items()))
