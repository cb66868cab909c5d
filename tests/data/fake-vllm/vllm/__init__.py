"""Fake vLLM (see ../README.md): records which process imported it."""

import os

__version__ = "0.0.fake"

if os.environ.get("FAKE_VLLM_IMPORT_LOG"):
    with open(os.environ["FAKE_VLLM_IMPORT_LOG"], "a") as _fh:
        _fh.write(f"{os.getpid()}\n")
if os.environ.get("FAKE_VLLM_IMPORT_SLEEP"):
    import time

    time.sleep(float(os.environ["FAKE_VLLM_IMPORT_SLEEP"]))

from vllm.entrypoints.llm import LLM  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402

__all__ = ["LLM", "SamplingParams"]
