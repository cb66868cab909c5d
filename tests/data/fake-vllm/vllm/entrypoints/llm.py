"""A fake ``LLM``: the model name picks the behaviour (see ../../README.md)."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

if os.environ.get("FAKE_VLLM_FAIL_IMPORT"):
    raise ImportError("the fake vLLM was told to fail its import")

# $FAKE_VLLM_KILL_HOST_ONCE (a file path): the forkserver host dies between forking a restart and reporting it.
# In the fork itself, before the restart becomes a session of its own (which the host waits for before it reports
# the restart's pid), the restart stops the host (SIGSTOP: its session id is still the host's pid); once the
# restart's engine has started its grandchild, it kills the host (SIGKILL). The file, created by the first fork,
# makes it happen once: restarts of a later host run normally.
_HOST_TO_KILL = None


def _stop_the_host_in_the_fork():
    global _HOST_TO_KILL
    try:
        os.close(os.open(os.environ["FAKE_VLLM_KILL_HOST_ONCE"], os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except (KeyError, FileExistsError):
        return
    _HOST_TO_KILL = os.getsid(0)
    os.kill(_HOST_TO_KILL, signal.SIGSTOP)


if os.environ.get("FAKE_VLLM_KILL_HOST_ONCE"):
    os.register_at_fork(after_in_child=_stop_the_host_in_the_fork)


def _record(kind):
    path = os.environ.get("FAKE_VLLM_PROCS")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"kind": kind, "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgrp(),
                                 "cuda_env": os.environ.get("FAKE_MARK")}) + "\n")


class LLM:
    def __init__(self, model, **kwargs):
        _record("engine")
        behaviour = str(model).rsplit("/", 1)[-1]
        if behaviour == "hang":
            stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
            child = subprocess.Popen([sys.executable, "-c", stubborn])
            with open(os.environ["FAKE_VLLM_PROCS"], "a") as fh:
                fh.write(json.dumps({"kind": "grandchild", "pid": child.pid}) + "\n")
            if _HOST_TO_KILL is not None:
                os.kill(_HOST_TO_KILL, signal.SIGKILL)
            print("loading forever", flush=True)
            time.sleep(600)
        if behaviour == "daemon":
            # Leaves the restart's process group: only its inherited environment (autotune's tag) gives it away.
            daemon = subprocess.Popen([sys.executable, "-c", "import os, time; time.sleep(600)"],
                                      start_new_session=True)
            with open(os.environ["FAKE_VLLM_PROCS"], "a") as fh:
                fh.write(json.dumps({"kind": "daemon", "pid": daemon.pid}) + "\n")
        if behaviour == "leak":
            # vLLM prints its non-default arguments, a credential among them; then (here) it loads for ever.
            print(f"non-default args: {kwargs}", flush=True)
            print("login", kwargs.get("hf_token"), file=sys.stderr, flush=True)
            time.sleep(600)
        if behaviour == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        comp = SimpleNamespace(cudagraph_mode="CUDAGraphMode.NONE", cudagraph_capture_sizes=[], mode="NONE")
        config = SimpleNamespace(compilation_config=comp, speculative_config=None,
                                 scheduler_config=SimpleNamespace(async_scheduling=True))
        model_config = SimpleNamespace(get_vocab_size=lambda: 1000)
        self.queue = []
        self.llm_engine = SimpleNamespace(vllm_config=config, model_config=model_config, step=self._step,
                                          has_unfinished_requests=lambda: bool(self.queue))
        print("INFO fake engine ready", flush=True)

    def generate(self, prompts, params, use_tqdm=False):
        tokens = int(params.kwargs["max_tokens"])
        time.sleep(0.01)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=list(range(tokens)))]) for _ in prompts]

    def enqueue(self, prompts, params, use_tqdm=False):
        self.queue += [int(p.kwargs["max_tokens"]) for p in params]
        return [str(len(self.queue))]

    def _step(self):
        # One engine step finishes the oldest request; $FAKE_VLLM_INFLIGHT logs how many were in the engine.
        path = os.environ.get("FAKE_VLLM_INFLIGHT")
        if path:
            with open(path, "a") as fh:
                fh.write(f"{len(self.queue)}\n")
        time.sleep(0.002)
        tokens = self.queue.pop(0)
        return [SimpleNamespace(finished=True, outputs=[SimpleNamespace(token_ids=list(range(tokens)))])]

    def get_metrics(self):
        return []
