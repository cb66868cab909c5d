"""Known-bad space files and cmd result lines, and the one-line errors autotune gives for them.

The messages were taken from the hand-written validators before the move to pydantic and stored in
``tests/data/golden_errors/errors.json``; ``tests/config/test_validation.py`` checks that today's messages are at
least as informative (the file, the dotted field path and a fix) and unchanged unless a case is listed in
:data:`REWORDED`. Regenerate the file only on purpose::

    PYTHONPATH=. python -m tests.golden_errors          # rewrites tests/data/golden_errors/errors.json
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from tests.conftest import SMALL_SPACE

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_errors" / "errors.json"
SOURCE = "spaces/bad.yaml"

#: The base every space case edits (the tests' small space).
BASE: dict[str, Any] = SMALL_SPACE  # the tests' small space, never edited in place (copied per case)

_DROP = object()

GOOD_RESULT = {"status": "ok", "passes_tok_s": [100.0, 101.0], "resolved": {}}


def _space(changes: dict[str, Any]) -> dict[str, Any]:
    """BASE with ``a.b.c: value`` edits (``_DROP`` removes the key)."""
    raw = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = raw
        *path, last = dotted.split(".")
        for key in path:
            node = node[key]
        if value is _DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return raw


#: (case id, kind, input, dotted field the message must name, a word of the fix it must give).
#: kind: ``space`` (a parsed mapping through ``parse_space``), ``yaml`` (file text through ``load_space``),
#: ``result`` (a cmd engine's last stdout line through ``parse_result_line``).
CASES: list[tuple[str, str, Any, str, str]] = [
    # top level
    ("top-unknown-key", "space", _space({"colour": "blue"}), "colour", "use one of"),
    ("top-missing-search", "space", _space({"search": _DROP}), "search", "add a 'search:' section"),
    ("top-not-mapping", "space", ["a", "b"], "top level", "key: value"),
    ("engine-args-reserved", "space", _space({"engine_args.compilation_config": {}}), "engine_args.compilation_config",
     "search:"),
    ("objective-unknown", "space", _space({"objective": "latency"}), "objective", "use one of"),
    ("objective-goodput-no-slo", "space", _space({"objective": "goodput"}), "slo", "add e.g. slo:"),
    # search
    ("modes-empty", "space", _space({"search.cudagraph_mode": []}), "search.cudagraph_mode", "list some of"),
    ("modes-unknown", "space", _space({"search.cudagraph_mode": ["FULLEST"]}), "search.cudagraph_mode[0]",
     "use one of"),
    ("k-not-int", "space", _space({"search.num_speculative_tokens": {"low": 0, "high": "six"}}),
     "search.num_speculative_tokens.high", "whole number"),
    ("k-high-below-low", "space", _space({"search.num_speculative_tokens": {"low": 3, "high": 1}}),
     "search.num_speculative_tokens.high", "high >= low"),
    ("k-too-high", "space", _space({"search.num_speculative_tokens": {"low": 0, "high": 40}}),
     "search.num_speculative_tokens.high", "at most"),
    ("k-unknown-key", "space", _space({"search.num_speculative_tokens": {"low": 0, "high": 2, "step": 1}}),
     "search.num_speculative_tokens.step", "use one of"),
    ("sizes-empty", "space", _space({"search.capture_sizes": {"empty": []}}), "search.capture_sizes.empty",
     "at least one"),
    ("sizes-pattern", "space", _space({"search.capture_sizes": {"gen": {"pattern": "fibonacci", "max": 8}}}),
     "search.capture_sizes.gen.pattern", "pow2"),
    ("sizes-no-max", "space", _space({"search.capture_sizes": {"gen": {"pattern": "pow2"}}}),
     "search.capture_sizes.gen.max", "max: 64"),
    ("sizes-huge", "space", _space({"search.capture_sizes": {"huge": {"pattern": "pow2", "max": 1000000000}}}),
     "search.capture_sizes.huge.max", "8192"),
    ("sizes-huge-fixed", "space", _space({"search.capture_sizes": {"big": [1, 100000]}}),
     "search.capture_sizes.big[1]", "8192"),
    ("sizes-default-reserved", "space", _space({"search.capture_sizes": {"default": [1]}}),
     "search.capture_sizes.default", "another name"),
    ("drafts-method", "space", _space({"search.drafts": {"d": {"method": "telepathy"}}}), "search.drafts.d.method",
     "ngram"),
    ("drafts-no-model", "space", _space({"search.drafts": {"d": {"method": "draft_model"}}}), "search.drafts.d.model",
     "model:"),
    ("drafts-empty", "space", _space({"search.drafts": {}}), "search.drafts", "declare at least one draft"),
    ("drafts-fixed-k", "space", _space({"search.drafts": {"d": {"method": "ngram", "num_speculative_tokens": 3}}}),
     "search.drafts.d.num_speculative_tokens", "search.num_speculative_tokens"),
    ("drafts-lookup", "space",
     _space({"search.drafts": {"d": {"method": "ngram", "prompt_lookup_min": 4, "prompt_lookup_max": 2}}}),
     "search.drafts.d.prompt_lookup_max", "prompt_lookup_max >= prompt_lookup_min"),
    ("infeasible", "space", _space({"search.num_speculative_tokens": {"low": 4, "high": 6},
                                    "search.drafts": {"d": {"method": "ngram", "max_k": 2}}}),
     "search.num_speculative_tokens.low", "max_k"),
    # search.engine_args
    ("dim-empty", "space", _space({"search.engine_args": {"max_num_batched_tokens": []}}),
     "search.engine_args.max_num_batched_tokens", "at least two"),
    ("dim-twice", "space", _space({"search.engine_args": {"max_num_batched_tokens": [4, 4]}}),
     "search.engine_args.max_num_batched_tokens", "once"),
    ("dim-model", "space", _space({"search.engine_args": {"model": ["a", "b"]}}), "search.engine_args.model",
     "the model is fixed"),
    ("dim-fixed", "space", _space({"search.engine_args": {"max_num_seqs": [4, 8]}}), "search.engine_args.max_num_seqs",
     "stop searching it"),
    ("dim-high-below-low", "space", _space({"search.engine_args": {"max_num_batched_tokens": {"low": 10, "high": 5}}}),
     "search.engine_args.max_num_batched_tokens.high", "high > low"),
    ("dim-log-zero", "space",
     _space({"search.engine_args": {"max_num_batched_tokens": {"low": 0, "high": 5, "log": True}}}),
     "search.engine_args.max_num_batched_tokens.low", "drop log"),
    ("dim-baseline", "space",
     _space({"search.engine_args": {"max_num_batched_tokens": {"low": 1, "high": 5, "baseline": 9}}}),
     "search.engine_args.max_num_batched_tokens.baseline", "within the range"),
    ("dim-unknown-key", "space",
     _space({"search.engine_args": {"max_num_batched_tokens": {"low": 1, "high": 5, "step": 1}}}),
     "search.engine_args.max_num_batched_tokens.step", "use one of"),
    ("dim-scalar", "space", _space({"search.engine_args": {"max_num_batched_tokens": 8}}),
     "search.engine_args.max_num_batched_tokens", "[4, 8, 16]"),
    # workload
    ("wl-concurrency-zero", "space", _space({"workload.concurrency": 0}), "workload.concurrency", ">= 1"),
    ("wl-concurrency-word", "space", _space({"workload.concurrency": "four"}), "workload.concurrency",
     "whole number"),
    ("wl-unknown-key", "space", _space({"workload.prompts": 3}), "workload.prompts", "use one of"),
    ("wl-not-mapping", "space", _space({"workload": "big"}), "workload", "key: value"),
    ("wl-temperature", "space", _space({"workload.temperature": -1}), "workload.temperature", "greedy"),
    ("wl-top-p", "space", _space({"workload.top_p": 0}), "workload.top_p", "(0, 1]"),
    ("wl-dataset-missing", "space", _space({"workload.dataset": "missing.jsonl"}), "workload.dataset",
     "existing file"),
    ("wl-dataset-vllm", "space", _space({"workload.dataset": {"vllm": "sonnet"}}), "workload.dataset.vllm",
     "spec_bench"),
    ("wl-dataset-format", "space", _space({"workload.dataset": {"format": "csv", "path": "x"}}),
     "workload.dataset.format", "jsonl"),
    ("wl-dataset-no-path", "space", _space({"workload.dataset": {"format": "jsonl"}}), "workload.dataset.path",
     "file's path"),
    ("wl-warmup", "space", _space({"workload.warmup_passes": 3, "workload.max_warmup_passes": 2}),
     "workload.max_warmup_passes", ">= warmup_passes"),
    ("wl-levels-no-aggregate", "space", _space({"workload.concurrency": [1, 8]}), "workload.aggregate",
     "aggregate: min"),
    ("wl-levels-aggregate", "space", _space({"workload.concurrency": [1, 8], "workload.aggregate": "max"}),
     "workload.aggregate", "mean"),
    ("wl-levels-empty", "space", _space({"workload.concurrency": [], "workload.aggregate": "min"}),
     "workload.concurrency", "[1, 8, 32]"),
    ("wl-levels-zero", "space", _space({"workload.concurrency": [1, 0], "workload.aggregate": "min"}),
     "workload.concurrency", "[1, 8, 32]"),
    ("wl-levels-repeat", "space", _space({"workload.concurrency": [8, 8], "workload.aggregate": "min"}),
     "workload.concurrency", "once"),
    ("wl-aggregate-one-level", "space", _space({"workload.aggregate": "min"}), "workload.aggregate",
     "remove aggregate"),
    ("wl-weights-min", "space",
     _space({"workload.concurrency": [1, 8], "workload.aggregate": "min", "workload.weights": [1, 2]}),
     "workload.weights", "aggregate: mean"),
    ("wl-weights-count", "space",
     _space({"workload.concurrency": [1, 8], "workload.aggregate": "mean", "workload.weights": [1]}),
     "workload.weights", "one weight per level"),
    ("wl-weights-zero", "space",
     _space({"workload.concurrency": [1, 8], "workload.aggregate": "mean", "workload.weights": [1, 0]}),
     "workload.weights", "positive weight"),
    ("wl-weights-string", "space",
     _space({"workload.concurrency": [1, 8], "workload.aggregate": "mean", "workload.weights": "1,2"}),
     "workload.weights", "weights: [1, 2, 1]"),
    # slo
    ("slo-unknown", "space", _space({"slo": {"tpot_p95_ms": 50}}), "slo.tpot_p95_ms", "METRIC_pP_ms"),
    ("slo-did-you-mean", "space", _space({"slo": {"e2e_p99": 5}}), "slo.e2e_p99", "did you mean e2el_p99_ms"),
    ("slo-zero", "space", _space({"slo": {"ttft_p99_ms": 0}}), "slo.ttft_p99_ms", "positive number"),
    ("slo-word", "space", _space({"slo": {"ttft_p99_ms": "fast"}}), "slo.ttft_p99_ms", "milliseconds"),
    ("slo-goodput-itl", "space", _space({"objective": "goodput", "slo": {"itl_p99_ms": 5, "tpot_p99_ms": 5}}),
     "slo.itl_p99_ms", "tpot limit"),
    # the file itself
    ("yaml-syntax", "yaml", "name: x\nsearch:\n  cudagraph_mode: [NONE\n  other: 1\n", "line 4", "YAML syntax"),
    ("yaml-duplicate", "yaml", "name: x\nengine_args: {model: a/b}\nsearch: {}\nworkload: {}\nsearch: {}\n",
     "line 5", "merge the two blocks"),
    # cmd engine result lines (no file: the field is the JSON key)
    ("result-no-passes", "result", {"status": "ok"}, "passes_tok_s", "non-empty list of numbers"),
    ("result-word-pass", "result", {**GOOD_RESULT, "passes_tok_s": ["fast"]}, "passes_tok_s", "finite numbers"),
    ("result-resolved-null", "result", {**GOOD_RESULT, "resolved": None}, "resolved", "cudagraph_mode"),
    ("result-sizes-string", "result", {**GOOD_RESULT, "resolved": {"cudagraph_capture_sizes": "4,8"}},
     "resolved.cudagraph_capture_sizes", "list of integers"),
    ("result-accept-string", "result", {**GOOD_RESULT, "accept_len": "2.5"}, "accept_len", "finite numbers"),
    ("result-cold-string", "result", {**GOOD_RESULT, "cold": "yes"}, "cold", "true or false"),
    ("result-latency-list", "result", {**GOOD_RESULT, "latency": [1]}, "latency", "tpot_p99_ms"),
    ("result-latency-word", "result", {**GOOD_RESULT, "latency": {"tpot_p99_ms": "slow"}}, "latency.tpot_p99_ms",
     "finite numbers"),
    ("result-status", "result", {**GOOD_RESULT, "status": "done"}, "status", "\"ok\" or \"failed\""),
    ("result-not-object", "result", [1, 2, 3], "not an object", "JSON"),
    ("result-levels-concurrency", "result", {**GOOD_RESULT, "levels": [{"concurrency": "8", "passes_tok_s": [1.0]}]},
     "levels[0].concurrency", "integer"),
]

#: Cases whose wording was improved on purpose (case id -> why); they are checked for the field and the fix only.
REWORDED: dict[str, str] = {}


def message(kind: str, value: Any, tmp: Path) -> str:
    """The one-line error autotune gives for ``value`` ('' if it is accepted)."""
    from autotune.config.space import SpaceError, load_space, parse_space
    from autotune.engines.cmd import ProtocolError, parse_result_line

    try:
        if kind == "space":
            parse_space(value, source=SOURCE, base_dir=tmp)
        elif kind == "yaml":
            path = tmp / "bad.yaml"
            path.write_text(value)
            try:
                load_space(path)
            except SpaceError as exc:
                raise SpaceError(SOURCE, exc.field, exc.problem, exc.fix) from None
        else:
            parse_result_line("some log line\n" + json.dumps(value) + "\n")
    except (SpaceError, ProtocolError) as exc:
        return str(exc)
    return ""


def collect(tmp: Path) -> dict[str, str]:
    return {case_id: message(kind, value, tmp) for case_id, kind, value, _, _ in CASES}


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        messages = collect(Path(tmp))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(messages, indent=1, sort_keys=True) + "\n")
    accepted = [k for k, v in messages.items() if not v]
    print(f"wrote {len(messages)} messages to {GOLDEN}" + (f"; ACCEPTED (not errors): {accepted}" if accepted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
