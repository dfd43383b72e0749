"""`agentprm serve`: a vLLM OpenAI-compatible server for a policy folder, supervised (agent/serving.py) — started
from vLLM's own virtualenv (`make vllm-venv`), health-checked, logged to a file, stopped on Ctrl-C. Point `eval`
and `rollout` at it with `--backend openai --base-url URL`."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a policy folder with vLLM (OpenAI-compatible) until interrupted",
                       description=__doc__)
    p.add_argument("--policy", required=True, metavar="DIR", help="the policy folder to serve")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = a free one)")
    p.add_argument("--log", metavar="FILE", help="the server's log, appended to (default serve.log here)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where vLLM runs (default cpu)")
    p.add_argument("--dtype", default="float32", help="vLLM's --dtype (default float32)")
    p.add_argument("--max-model-len", type=int, default=1024, help="context length (default 1024)")
    p.add_argument("--vllm-python", metavar="PATH",
                   help="the Python with vLLM (default $AGENTPRM_VLLM_PYTHON, then .venv-vllm/bin/python)")
    p.set_defaults(func=run)


def run(args) -> int:
    import time
    from pathlib import Path

    from agentprm.agent.serving import VLLMServer

    log = Path(args.log or "serve.log")
    server = VLLMServer(args.policy, python=args.vllm_python, host=args.host, port=args.port, log=log,
                        device=args.device, dtype=args.dtype, max_model_len=args.max_model_len)
    print(f"starting vLLM on {server.policy} (log {log}) ...", flush=True)
    try:
        server.start()
        print(f"serving {server.policy} at {server.url}  (eval/rollout: --backend openai --base-url {server.url}); "
              "Ctrl-C stops it", flush=True)
        while server.proc.poll() is None:
            time.sleep(1.0)
        print(f"vLLM exited with code {server.proc.returncode} (log {log})", flush=True)
        return 1
    finally:
        server.stop()
