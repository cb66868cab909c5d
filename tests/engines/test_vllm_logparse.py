"""Start-up log lines that change the plan, and one-line failure reasons, from real vLLM log shapes."""

from __future__ import annotations

from autotune.engines.vllm import build_resolved
from autotune.engines.vllm._logparse import failure_reason, parse_startup_log, strip_prefix
from autotune.core.records import Detail

# Shapes copied from vLLM 0.26 (H200) and 0.32 (CPU) start-up logs.
GPU_LOG = """\
(EngineCore_DP0 pid=164) INFO 11-30 06:59:53 [model.py:733] Resolved architecture: LlamaForCausalLM
(EngineCore_DP0 pid=164) WARNING 11-30 06:59:53 [vllm.py:725] Model Runner V2 does not yet support speculative method 'draft_model'; using the V1 model runner instead.
(EngineCore_DP0 pid=164) WARNING 11-30 06:59:53 [vllm.py:1605] Async scheduling not supported with draft_model-based speculative decoding and will be disabled.
(EngineCore pid=168) WARNING 05-14 08:25:39 [compilation.py:1390] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE
(EngineCore pid=168) INFO 05-14 08:25:39 [gpu_model_runner.py:5963] Profiling CUDA graph memory: PIECEWISE=7 (largest=32)
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/7 [00:00<?, ?it/s]\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE):  57%|#####7    | 4/7 [00:01<00:00,  3.1it/s]\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 7/7 [00:02<00:00,  3.4it/s]
(EngineCore pid=168) WARNING 05-14 08:25:39 [compilation.py:1390] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE
"""


def test_every_plan_changing_line_is_found_once_and_verbatim() -> None:
    found = parse_startup_log(GPU_LOG)
    assert found.model_runner == "v1"
    assert found.async_scheduling is False
    assert found.mode_changes == ("PIECEWISE", "PIECEWISE")
    assert found.captures == {"mixed prefill-decode, PIECEWISE": {"done": 7, "total": 7}}
    assert found.notes == (
        "Model Runner V2 does not yet support speculative method 'draft_model'; using the V1 model runner instead.",
        "Async scheduling not supported with draft_model-based speculative decoding and will be disabled.",
        "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend"
        " (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 7/7",
    )
    assert found.details() == {
        "model_runner": "v1",
        "async_scheduling": False,
        "log_cudagraph_mode": "PIECEWISE",
        "graphs_captured": {"mixed prefill-decode, PIECEWISE": {"done": 7, "total": 7}},
    }


def test_overriding_lines_and_their_target_mode() -> None:
    log = "\n".join([
        "WARNING 01-01 00:00:00 [vllm.py:1051] Dynamic speculative decoding changes the target verification length "
        "at runtime. Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability.",
        "INFO 01-01 00:00:00 [vllm.py:3180] CUDA graphs are not supported with stock torch.compile in Model "
        "Runner V2. Overriding cudagraph_mode FULL to NONE.",
        "INFO 01-01 00:00:00 [vllm.py:1893] Encoder-decoder models do not support FULL. Overriding cudagraph_mode to "
        "FULL_DECODE_ONLY.",
    ])
    assert parse_startup_log(log).mode_changes == ("PIECEWISE", "NONE", "FULL_DECODE_ONLY")
    assert len(parse_startup_log(log).notes) == 3


def test_capital_setting_and_eager_lines_count_as_mode_changes() -> None:
    log = ("WARNING 01-01 00:00:00 [compilation.py:1213] Piecewise compilation with empty splitting_ops does not "
           "contain piecewise cudagraph. Setting cudagraph_mode to NONE. Hint: ...\n"
           "INFO 01-01 00:00:00 [vllm.py:1930] Cudagraph is disabled under eager mode\n")
    assert parse_startup_log(log).mode_changes == ("NONE", "NONE")


def test_async_scheduling_on_is_recorded_but_not_a_note() -> None:
    found = parse_startup_log("INFO 01-01 00:00:00 [vllm.py:1] Asynchronous scheduling is enabled.\n")
    assert found.async_scheduling is True
    assert found.notes == ()


def test_cpu_log_notes_the_triton_runner_fallback_and_nothing_else() -> None:
    log = ("(MainProcess pid=8976) WARNING 11-30 07:00:52 [vllm.py:725] Model Runner V2 requires Triton; using the "
           "V1 model runner instead.\n"
           "(MainProcess pid=8976) INFO 11-30 07:00:52 [kernel.py:467] Final IR op priority after setting platform "
           "defaults: IrOpPriorityConfig(rms_norm=['native'])\n")
    found = parse_startup_log(log)
    assert found.model_runner == "v1"
    assert found.mode_changes == ()
    assert found.notes == ("Model Runner V2 requires Triton; using the V1 model runner instead.",)


def test_strip_prefix_handles_rank_prefixes_and_progress_bars() -> None:
    assert strip_prefix("[rank0]: RuntimeError: boom") == "RuntimeError: boom"
    assert strip_prefix("a 10%\rb 100%") == "b 100%"
    assert strip_prefix("(APIServer pid=1) INFO 02-07 15:45:42 [core.py:1] hello") == "hello"


def test_oom_while_capturing_names_the_largest_size() -> None:
    log = GPU_LOG + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    assert failure_reason(log, capture_sizes=[1, 2, 4, 512]) == (
        "CUDA out of memory while capturing graphs for sizes up to 512")
    # Engine-default sizes: the largest comes from vLLM's own "Profiling CUDA graph memory" line.
    assert failure_reason(log) == "CUDA out of memory while capturing graphs for sizes up to 32"


def test_oom_before_capture_and_during_measurement() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB\n"
    assert failure_reason("Loading weights\n" + oom).startswith("CUDA out of memory during start-up")
    assert failure_reason(GPU_LOG + oom, ready=True) == "CUDA out of memory during measurement"


def test_rejected_config_gives_the_value_error_line_not_the_wrapper() -> None:
    message = ("1 validation error for VllmConfig\n  Value error, No valid cudagraph sizes after rounding to multiple "
               "of 4 (num_speculative_tokens + 1) [type=value_error, input_value=ArgsKwargs((), {}), "
               "input_type=ArgsKwargs]\n    For further information visit https://errors.pydantic.dev/2.11/v/value_error")
    reason = failure_reason("whatever", error={"type": "ValidationError", "message": message})
    assert reason == "ValidationError: No valid cudagraph sizes after rounding to multiple of 4 (num_speculative_tokens + 1)"


def test_generic_wrapper_errors_are_skipped_for_the_root_cause() -> None:
    log = "\n".join([
        "Traceback (most recent call last):",
        '[rank0]:   File "x.py", line 1, in <module>',
        "[rank0]: RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ])
    assert failure_reason(log) == "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2 kv_cache_idx=0"
    wrapper = {"type": "RuntimeError", "message": "Engine core initialization failed. See root cause above."}
    assert failure_reason(log, error=wrapper).startswith("RuntimeError: Unsupported CPU attention")


def test_no_exception_falls_back_to_the_last_line() -> None:
    assert failure_reason("starting\nKilled\n") == "Killed"
    assert failure_reason("") == "engine exited without output"


def test_build_resolved_merges_runner_facts_over_log_facts() -> None:
    ready = {"resolved": {"cudagraph_mode": "CUDAGraphMode.PIECEWISE", "cudagraph_capture_sizes": [4, 8],
                          "compile_mode": "VLLM_COMPILE",
                          "details": {"model_runner": "v1", "async_scheduling": False, "speculative_method": "draft_model"}}}
    resolved = build_resolved(ready, GPU_LOG)
    assert resolved is not None
    assert resolved.cudagraph_mode == "PIECEWISE"
    assert resolved.cudagraph_capture_sizes == (4, 8)
    assert resolved.details[Detail.SPEC_METHOD] == "draft_model"
    assert resolved.details["graphs_captured"] == {"mixed prefill-decode, PIECEWISE": {"done": 7, "total": 7}}
    assert len(resolved.notes) == 4


def test_build_resolved_is_none_when_the_engine_said_nothing() -> None:
    assert build_resolved(None, "Traceback\nKeyError: x\n") is None
    died = build_resolved(None, GPU_LOG)
    assert died is not None and died.cudagraph_mode is None and died.notes


CONFIG_LINE = (
    "(EngineCore_DP0 pid=77) INFO 11-30 07:00:52 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/m', speculative_config=None, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, "
    "'debug_dump_path': None, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, "
    "'cudagraph_num_of_warmups': 0, 'cudagraph_capture_sizes': [1, 2, 4, 8], 'cudagraph_copy_inputs': False}\n"
)


def test_serve_mode_reads_the_engine_core_config_line() -> None:
    from autotune.engines.vllm._logparse import parse_engine_config

    found = parse_engine_config(CONFIG_LINE)
    assert found is not None
    assert found["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert found["cudagraph_capture_sizes"] == [1, 2, 4, 8]
    assert found["compile_mode"] == "VLLM_COMPILE"
    assert parse_engine_config("no such line") is None


def test_serve_mode_applies_later_worker_mode_changes() -> None:
    from autotune.engines.vllm._logparse import parse_engine_config

    later = ("WARNING 01-01 00:00:00 [compilation.py:1] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with "
             "spec-decode for attention backend X (support: Y); setting cudagraph_mode=PIECEWISE\n")
    found = parse_engine_config(CONFIG_LINE + later)
    assert found is not None and found["cudagraph_mode"] == "PIECEWISE"
    resolved = build_resolved({"resolved": None}, CONFIG_LINE + later)
    assert resolved is not None and resolved.cudagraph_mode == "PIECEWISE"
    assert resolved.cudagraph_capture_sizes == (1, 2, 4, 8)
    assert "resolved_from" in resolved.details
