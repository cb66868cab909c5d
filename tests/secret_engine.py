"""A cmd engine that needs a credential, as a served model behind an API key does (issue 44, principle 2).

Usage (as a ``cmd`` engine command): ``python tests/secret_engine.py --api-key KEY [example engine args...]``.

The keys it accepts are in its environment, as a real server's are configured (``SECRET_ENGINE_API_KEY``, and
``SECRET_ENGINE_HF_TOKEN`` for the configuration's ``engine_args.hf_token``). A restart given any other key - the
literal ``${VAR}``, ``<redacted>`` - fails with a 401 line that quotes the key it got, as careless servers do. Like
vLLM printing its non-default arguments, it also echoes the credentials it was given on stdout and stderr, in
forms no pattern recognises: only autotune's knowledge of the resolved values can keep them out of its logs.
Otherwise it is the example engine (``examples/cmd_engine_example.py``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if __name__ == "__main__":
    from examples.cmd_engine_example import parse_args, run_engine

    argv = sys.argv[1:]
    key = argv[argv.index("--api-key") + 1]
    del argv[argv.index("--api-key"):argv.index("--api-key") + 2]
    request = json.load(sys.stdin)
    token = request["config"]["engine_args"].get("hf_token")
    print(f"INFO started; key in use {key}; hub login {token}", flush=True)
    print(f"serving with {key} {token}", file=sys.stderr, flush=True)
    if key != os.environ.get("SECRET_ENGINE_API_KEY") or token != os.environ.get("SECRET_ENGINE_HF_TOKEN"):
        print(json.dumps({"status": "failed", "error": f"401 Unauthorized: key {key} / login {token} rejected"}))
        sys.exit(1)
    print(json.dumps(run_engine(request, parse_args(argv))), flush=True)
