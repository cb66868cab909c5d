"""Prompts and latency for the runner, in the engine's interpreter: the standard library plus vLLM when asked.

Imported by :mod:`._runner` from its own directory (the runner runs by path, wherever vLLM lives), so like the
runner it imports nothing from autotune.

* :func:`load_requests` turns the workload's dataset into ``[{"prompt": text, "output_len": n}]``: a JSONL of
  ``{"prompt": ...}`` or chat ``{"messages": [...]}`` lines, a ShareGPT JSON file, or any dataset vLLM's benchmark
  loaders read (``vllm.benchmarks.datasets.get_samples``, as ``vllm bench serve --dataset-name`` does). Text goes
  through the model's chat template where it has one; prompts that do not fit the model next to their output are
  skipped; ``num_prompts`` are drawn by the workload's seed (with repetition when the dataset is smaller).
* :func:`latency_summary` turns per-request timings into the flat percentiles the engine records
  (``ttft_p99_ms`` ...), request throughput, and goodput against the workload's limits.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (50, 90, 99)
#: ShareGPT-style conversations with a reply shorter than this many tokens say little about decode speed.
_MIN_SHAREGPT_REPLY = 4


class DatasetError(ValueError):
    """The dataset cannot be read or has no usable prompt; the message says which file and why."""


def chat_text(tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    """Messages as the model reads them: its chat template, else the turns' contents one per line."""
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    return "\n".join(str(m.get("content", "")) for m in messages)


def _rows_jsonl(path: str) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not ("prompt" in row or "messages" in row):
                raise DatasetError(f"{path}:{number}: needs a 'prompt' text or a 'messages' list")
            rows.append(row)
    return rows


def _rows_sharegpt(path: str, tokenizer: Any) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not a ShareGPT JSON file ({exc.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects")
    rows = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, reply = turns[0], turns[1]
        if not isinstance(first, dict) or not isinstance(reply, dict):
            continue  # as config/workload.py's load check reads a row: not a conversation
        if first.get("from") not in ("human", "user") or not first.get("value") or not reply.get("value"):
            continue
        reply_len = len(tokenizer(str(reply["value"])).input_ids)
        if reply_len < _MIN_SHAREGPT_REPLY:
            continue
        rows.append({"messages": [{"role": "user", "content": str(first["value"])}], "output_len": reply_len})
    return rows


def _vllm_requests(dataset: dict[str, Any], workload: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    from vllm.benchmarks.datasets import add_dataset_parser, get_samples
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_dataset_parser(parser)
    args = parser.parse_args(vllm_dataset_argv(dataset, workload))
    args.backend = "vllm"  # the completions endpoint's prompt shape, as `vllm bench serve` uses
    samples = get_samples(args, tokenizer)
    return [{"prompt": s.prompt, "output_len": int(s.expected_output_len or workload["output_len"])}
            for s in samples if isinstance(s.prompt, str)]


def vllm_dataset_argv(dataset: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    """``--dataset-name ...`` options for vLLM's loaders, shared by offline mode and ``vllm bench serve``."""
    argv = ["--dataset-name", str(dataset["name"]), "--num-prompts", str(workload["num_prompts"]),
            "--seed", str(workload.get("seed", 0))]
    if dataset.get("path"):
        argv += ["--dataset-path", str(dataset["path"])]
    for key, value in sorted((dataset.get("args") or {}).items()):
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    return argv


def load_requests(workload: dict[str, Any], tokenizer: Any, max_model_len: int | None) -> list[dict[str, Any]]:
    """``num_prompts`` requests ``{"prompt": text, "output_len": n, "prompt_len": tokens}`` drawn by seed.

    Raises:
        DatasetError: unreadable file, or no prompt fits ``max_model_len`` with its output.
    """
    dataset = dict(workload.get("dataset") or {})
    source = dataset.get("source")
    path = str(dataset.get("path"))
    default_out = int(workload["output_len"])
    if source == "vllm":
        rows = _vllm_requests(dataset, workload, tokenizer)
    elif source == "sharegpt":
        rows = _rows_sharegpt(path, tokenizer)
    elif source == "jsonl":
        rows = _rows_jsonl(path)
    else:
        raise DatasetError(f"unknown dataset source {source!r}")
    requests = []
    skipped = 0
    for row in rows:
        text = chat_text(tokenizer, row["messages"]) if "messages" in row else None
        if text is None:
            prompt = str(row["prompt"])
            # A plain prompt is what a user types: a chat model sees it inside its template (vLLM's custom
            # dataset does the same); vLLM datasets arrive already formatted.
            text = prompt if source == "vllm" else chat_text(tokenizer, [{"role": "user", "content": prompt}])
        out_len = int(row.get("output_len") or default_out)
        prompt_len = len(tokenizer(text).input_ids)
        if max_model_len is not None and prompt_len + out_len > max_model_len:
            skipped += 1
            continue
        requests.append({"prompt": text, "output_len": out_len, "prompt_len": prompt_len})
    if not requests:
        why = f"all {skipped} prompts are longer than max_model_len={max_model_len} allows" if skipped else "no prompts"
        raise DatasetError(f"dataset {dataset.get('path') or dataset.get('name')}: {why}")
    rng = random.Random(int(workload.get("seed", 0)))
    n = int(workload["num_prompts"])
    if len(requests) >= n:
        return rng.sample(requests, n)
    order = list(requests)
    rng.shuffle(order)
    return [order[i % len(order)] for i in range(n)]


# -- latency ------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float, presorted: bool = False) -> float:
    """The ``q``-th percentile with linear interpolation (numpy's default), ``nan`` for no values."""
    if not values:
        return math.nan
    xs = values if presorted else sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def request_timing(ttft_s: float, e2el_s: float, output_len: int, itls_s: list[float] | None) -> dict[str, Any]:
    """One request's timings; TPOT excludes the first token, as ``vllm bench serve`` computes it."""
    tpot = (e2el_s - ttft_s) / (output_len - 1) if output_len > 1 else None
    return {"ttft": ttft_s, "e2el": e2el_s, "tpot": tpot, "itl": itls_s}


def latency_summary(timings: list[dict[str, Any]], seconds: float, slo: dict[str, float]) -> dict[str, float]:
    """Flat percentiles in milliseconds over every request, request throughput, goodput.

    ``seconds`` is the wall time the requests took (summed over passes). Goodput counts requests/s whose own TTFT,
    TPOT and end-to-end latency are each within the strictest limit set on that metric (vLLM's definition;
    inter-token limits apply to percentiles only, there is no per-request ITL to hold to them).
    """
    out: dict[str, float] = {}
    for metric in LATENCY_METRICS:
        if metric == "itl":
            values = [x for t in timings if t.get("itl") for x in t["itl"]]
        else:
            values = [t[metric] for t in timings if t.get(metric) is not None]
        if not values:
            continue
        values.sort()
        for q in PERCENTILES:
            out[f"{metric}_p{q}_ms"] = percentile(values, q, presorted=True) * 1000.0
        out[f"{metric}_mean_ms"] = sum(values) / len(values) * 1000.0
    out["requests"] = float(len(timings))
    if seconds > 0:
        out["request_throughput"] = len(timings) / seconds
    if slo and seconds > 0:
        limits: dict[str, float] = {}
        for key, ms in slo.items():
            metric = key.split("_p", 1)[0]
            if metric in ("ttft", "tpot", "e2el"):
                limits[metric] = min(limits.get(metric, math.inf), float(ms) / 1000.0)
        good = sum(1 for t in timings
                   if all(t.get(m) is None or t[m] <= limit for m, limit in limits.items()))
        out["goodput"] = good / seconds
    return out
