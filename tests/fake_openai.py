"""A test double of vLLM's OpenAI-compatible server (the parts agent/remote.py uses), answering from a local HF
model: /v1/models, /tokenize and /v1/completions with token-id prompts, `n`, `seed`, `echo` + `max_tokens: 0`
prompt log-probs, `return_tokens_as_token_ids` ("token_id:N") and `stop_token_ids`, in vLLM's response layout.
It checks the client's plumbing (ids, ordering, stop tokens, retries, errors) without a server install; the same
checks against the real engine are the `vllm`-marked tests (tests/test_vllm.py)."""
from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import torch

from agentprm.agent.lm import HFBackend
from agentprm.prm.serve import JSONHandler


class FakeServer:
    def __init__(self, model, tokenizer, model_id: str, eos_id: int, fail_first: int = 0, drop_stop_token=False,
                 port: int = 0):
        self.model, self.tokenizer, self.model_id = model.eval(), tokenizer, model_id
        self.backend = HFBackend(model, tokenizer.pad_token_id, eos_id)
        self.fail_first, self.drop_stop_token, self.requests = fail_first, drop_stop_token, []
        self.lock = threading.Lock()
        server = self

        class Handler(JSONHandler):

            def do_GET(self):
                server.requests.append(("GET", self.path, None))
                if self.path == "/health":
                    return self.reply(200, {})
                if self.path == "/v1/models":
                    return self.reply(200, {"object": "list", "data": [{"id": server.model_id, "root": server.model_id}]})
                self.reply(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(("POST", self.path, body))
                    if server.fail_first > 0:
                        server.fail_first -= 1
                        return self.reply(503, {"error": "warming up"})
                if body.get("model") != server.model_id:
                    return self.reply(404, {"error": f"model {body.get('model')} does not exist"})
                if self.path == "/tokenize":
                    ids = server.tokenizer(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
                    return self.reply(200, {"tokens": ids["input_ids"], "count": len(ids["input_ids"])})
                if self.path == "/v1/completions":
                    with server.lock:   # one model call at a time, as the engine's scheduler would serialise them
                        return self.reply(200, server.complete(body))
                self.reply(404, {"error": "not found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @torch.inference_mode()
    def complete(self, body: dict) -> dict:
        prompts = body["prompt"] if body["prompt"] and isinstance(body["prompt"][0], list) else [body["prompt"]]
        if body.get("echo") and body.get("max_tokens") == 0:
            width = max(map(len, prompts))    # one right-padded batch: positions start at 0 in every row
            ids = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
            mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None])[..., 0]
            return {"choices": [{"index": i, "text": "", "finish_reason": "length",
                                 "logprobs": {"tokens": [f"token_id:{t}" for t in p],
                                              "token_logprobs": [None, *logp[i, :len(p) - 1].tolist()]}}
                                for i, p in enumerate(prompts)]}
        stop = body.get("stop_token_ids", [])
        out = self.backend.generate([prompts[0]], body.get("n", 1), body["temperature"], body["max_tokens"],
                                    body["seed"], top_k=body.get("top_k", 0), top_p=body.get("top_p", 1.0))[0]
        choices, self.last_shown = [], []
        for i, ids in enumerate(out):
            stopped = bool(ids) and ids[-1] in stop
            shown = ids[:-1] if stopped and self.drop_stop_token else ids
            self.last_shown.append(shown)
            choices.append({"index": i, "text": "", "finish_reason": "stop" if stopped else "length",
                            "logprobs": {"tokens": [f"token_id:{t}" for t in shown]}})
        return {"choices": choices}


def serve_folder(folder: Path, **kwargs) -> FakeServer:
    from agentprm.agent.encoding import end_of_turn_id
    from agentprm.models import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(folder)
    return FakeServer(load_causal_lm(folder), tokenizer, str(folder), end_of_turn_id(tokenizer), **kwargs)


if __name__ == "__main__":   # stands in for `python -m vllm.entrypoints.openai.api_server --model DIR --port P ...`
    import sys

    argv = sys.argv[1:]
    folder, port = Path(argv[argv.index("--model") + 1]), int(argv[argv.index("--port") + 1])
    serve_folder(folder, port=port)
    print(f"fake vLLM serving {folder} on {port}", flush=True)
    threading.Event().wait()
