"""Generation on a server: `OpenAIBackend`, the `GenerationBackend` (agent/lm.py) over any OpenAI-compatible
`/v1/completions` endpoint — vLLM first (`python -m vllm.entrypoints.openai.api_server --model DIR`).

Token-in-token-out, like the in-process backend: prompts go out as token ids and completions come back as token
ids, so the trainer later sees exactly the ids that were sampled (no decode/re-encode drift).
  - generate: one request per prompt (`n`, `temperature`, `max_tokens`, `seed`, `stop_token_ids` = the template's
    end-of-turn token); the completion's ids are read from `logprobs.tokens` with `return_tokens_as_token_ids`
    ("token_id:123"), or from `token_ids` where the server sends them. Each prompt's seed is derived from the call's
    seed and the prompt's position, so a prompt's completions do not depend on how the calls were batched.
  - score (choose mode): one request per state with prompt + candidate ids for every admissible command,
    `echo: true, max_tokens: 0, logprobs: 0`; a candidate's log-likelihood is the sum of its positions' echoed
    prompt log-probs — the quantity `agent/scoring.py` computes in-process.
Requests run `concurrency` at a time; a connection error, a timeout or a 5xx is retried `retries` times with
exponential backoff, then a one-line error; a 4xx is a one-line error at once. On first use the backend checks that
the server serves the policy it was pointed at (`/v1/models`) with the policy folder's tokenizer (`/tokenize`, where
the server has it), so a server left running with another model is refused before any episode is played.
"""
from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from agentprm.errors import UserError

BACKENDS = ("hf", "openai")
PROBE_TEXT = "go to countertop 1\nYou arrive at countertop 1. On the countertop 1, you see a mug 2."


@dataclass
class BackendConfig:
    backend: str = "hf"             # hf: the policy folder's model, run in this process | openai: an OpenAI-compatible
                                    # server (vLLM) serving that folder, at --base-url (agent/remote.py)
    base_url: str = "http://127.0.0.1:8000"   # the server (backend openai); /v1 is appended. Several, comma-separated:
                                    # one generation replica per server (agent/replicas.py)
    served_model: str = ""          # the model name the server knows the policy by ("" = the one model it serves,
                                    # which must be the policy folder)
    timeout_s: float = 120.0        # per request
    retries: int = 3                # retries of a request after a connection error, a timeout or a 5xx
    concurrency: int = 8            # requests in flight at once (per server)
    replicas: int = 1               # backend hf: data-parallel copies of π as Ray actors, one GPU each where the
                                    # cluster has them (agent/replicas.py); backend openai: list the servers in base_url


def check_backend_config(cfg: BackendConfig, where: str = "backend") -> None:
    if cfg.backend not in BACKENDS:
        raise UserError(f"{where}: field 'backend' must be one of {', '.join(BACKENDS)}, got {cfg.backend!r}")
    if cfg.backend == "openai":
        bad = [u for u in server_urls(cfg.base_url) if not u.startswith(("http://", "https://"))]
        if bad or not server_urls(cfg.base_url):
            raise UserError(f"{where}: field 'base_url' must be one or more comma-separated http:// or https:// "
                            f"URLs, got {cfg.base_url!r}")
        if cfg.replicas != 1:
            raise UserError(f"{where}: field 'replicas' is for backend hf; with backend openai each server listed in "
                            f"'base_url' (comma-separated) is one replica")


def server_urls(base_url: str) -> list[str]:
    return [u.strip() for u in base_url.split(",") if u.strip()]


class OpenAIBackend:
    def __init__(self, cfg: BackendConfig, tokenizer, policy_dir: str | Path, end_of_turn: int):
        import httpx

        check_backend_config(cfg)
        self.cfg, self.tokenizer, self.policy_dir, self.eos_id = cfg, tokenizer, Path(policy_dir), end_of_turn
        self.url = cfg.base_url.rstrip("/").removesuffix("/v1")
        self.client = httpx.Client(timeout=cfg.timeout_s)
        self.model: str | None = None     # the served name, once checked

    # ------------------------------------------------------------------ the GenerationBackend interface
    def score(self, prompt_ids: Sequence[Sequence[int]], candidate_ids: Sequence[Sequence[Sequence[int]]]) -> list:
        import torch

        def one(k: int) -> torch.Tensor:
            prompt, cands = list(prompt_ids[k]), candidate_ids[k]
            body = {"prompt": [prompt + list(c) for c in cands], "echo": True, "max_tokens": 0, "logprobs": 0,
                    "temperature": 0.0}
            choices = sorted(self._post("/v1/completions", body)["choices"], key=lambda c: c["index"])
            if len(choices) != len(cands):
                raise UserError(f"{self.url}: answered {len(choices)} choices for {len(cands)} scored candidates")
            sums = []
            for c, cand in zip(choices, cands):
                logps = (c.get("logprobs") or {}).get("token_logprobs") or []
                tail = logps[len(logps) - len(cand):] if len(cand) else []
                if len(logps) < len(prompt) + len(cand) or any(x is None for x in tail):
                    raise UserError(f"{self.url}: echoed {len(logps)} prompt log-probs for {len(prompt) + len(cand)} "
                                    "tokens (does the server support echo with max_tokens 0?)")
                sums.append(sum(tail))
            return torch.tensor(sums, dtype=torch.float32)

        return self._map(one, len(prompt_ids))

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, temperature: float, max_new_tokens: int,
                 seed: int, top_k: int = 0, top_p: float = 1.0) -> list[list[list[int]]]:
        restrict = {**({"top_k": top_k} if top_k else {}), **({"top_p": top_p} if top_p < 1.0 else {})}

        def one(k: int) -> list[list[int]]:
            body = {"prompt": list(prompt_ids[k]), "n": n, "temperature": temperature, "max_tokens": max_new_tokens,
                    "seed": random.Random(seed * 1_000_003 + k).getrandbits(31), "logprobs": 0,
                    "return_tokens_as_token_ids": True, "stop_token_ids": [self.eos_id],
                    "skip_special_tokens": False, **restrict}
            choices = sorted(self._post("/v1/completions", body)["choices"], key=lambda c: c["index"])
            return [self._completion_ids(c) for c in choices]

        return self._map(one, len(prompt_ids))

    # ------------------------------------------------------------------ plumbing
    def _completion_ids(self, choice: dict) -> list[int]:
        if choice.get("token_ids") is not None:
            ids = [int(t) for t in choice["token_ids"]]
        else:
            tokens = (choice.get("logprobs") or {}).get("tokens")
            if tokens is None:
                raise UserError(f"{self.url}: a completion without token ids (the server needs logprobs with "
                                "return_tokens_as_token_ids, as vLLM has)")
            try:
                ids = [int(str(t).rsplit(":", 1)[1]) for t in tokens]
            except (IndexError, ValueError):
                raise UserError(f"{self.url}: completion tokens are not 'token_id:N' strings (got {tokens[:3]!r}); "
                                "the server ignored return_tokens_as_token_ids") from None
        # a stop at the end-of-turn token: the reply ends with it, as the in-process backend's do
        if choice.get("finish_reason") == "stop" and (not ids or ids[-1] != self.eos_id):
            ids.append(self.eos_id)
        return ids

    def _map(self, fn, count: int) -> list:
        self._check_served()
        if count <= 1 or self.cfg.concurrency <= 1:
            return [fn(k) for k in range(count)]
        with ThreadPoolExecutor(min(self.cfg.concurrency, count)) as pool:
            return list(pool.map(fn, range(count)))

    def _check_served(self) -> None:
        """The served model is the policy folder (or the name given) and tokenizes as its tokenizer does."""
        if self.model is not None:
            return
        served = [m.get("id") for m in self._request("GET", "/v1/models")["data"]]
        name = self.cfg.served_model
        if name:
            if name not in served:
                raise UserError(f"{self.url}: serves {', '.join(map(str, served))}, not {name!r} (--served-model)")
        elif len(served) != 1 or not _same_folder(served[0], self.policy_dir):
            raise UserError(f"{self.url}: serves {', '.join(map(str, served)) or 'no model'}, not the policy folder "
                            f"{self.policy_dir} (start the server on that folder, or name the model: --served-model)")
        model = name or served[0]
        expected = self.tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
        got = self._request("POST", "/tokenize", {"model": model, "prompt": PROBE_TEXT, "add_special_tokens": False},
                            missing_ok=True)
        if got is not None and list(got.get("tokens", [])) != list(expected):
            raise UserError(f"{self.url}: the served model's tokenizer differs from {self.policy_dir}'s "
                            f"(a probe text tokenizes to {len(got.get('tokens', []))} vs {len(expected)} tokens)")
        self.model = model

    def _post(self, path: str, body: dict) -> dict:
        return self._request("POST", path, {"model": self.model, **body})

    def _request(self, method: str, path: str, body: dict | None = None, missing_ok: bool = False) -> Any:
        import httpx

        url, error = self.url + path, ""
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                r = self.client.request(method, url, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as e:
                error = f"{type(e).__name__}: {e}"
                continue
            if r.status_code == 404 and missing_ok:
                return None
            if r.status_code >= 500:
                error = f"HTTP {r.status_code}: {r.text[:200]}"
                continue
            if r.status_code >= 400:
                raise UserError(f"{url}: HTTP {r.status_code}: {' '.join(r.text[:300].split())}")
            try:
                return r.json()
            except ValueError:
                raise UserError(f"{url}: answered something other than JSON ({r.text[:80]!r})") from None
        raise UserError(f"{url}: no answer after {self.cfg.retries + 1} tries ({' '.join(error.split())}); is the "
                        "server running? (agentprm serve --policy DIR starts one)")


def _same_folder(served: Any, folder: Path) -> bool:
    try:
        return Path(str(served)).resolve() == folder.resolve()
    except OSError:
        return False
