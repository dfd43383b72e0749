"""The PRM as a reward for other trainers: `agentprm serve-prm --prm DIR` answers HTTP requests with Q(s_t, a_t) for
every turn of the episodes it is sent, so a verl or OpenRLHF custom reward function (or anything that speaks HTTP)
scores its agent's trajectories with a PRM trained here. The standard library's threaded HTTP server; the model
scores one batch at a time.

    GET  /health  -> {"status": "ok", "prm": "<folder>"}
    POST /score   {"episodes": [{"task": "put a mug in the fridge.", "steps": [
                       {"observation": "You are in the middle of a room ...", "admissible": ["go to fridge 1", ...],
                        "action": "go to fridge 1"}, ...]}, ...]}
                  -> {"scores": [[Q(s_0, a_0), Q(s_1, a_1), ...], ...]}

A step is what the agent saw before acting (its observation and admissible commands) and what it did, as in the
trajectory schema (docs/data.md); the state the PRM scores is rebuilt from the episode's steps so far, exactly as
training rebuilt it. A bad request is answered 400 with {"error": "<one line naming the field>"}.
"""
from __future__ import annotations

import hmac
import json
import threading
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentprm.agent.critic import Critic
from agentprm.agent.replay import episode_states
from agentprm.data.tables import MAX_TEXT   # characters of any one text field: its cost bounded before work
from agentprm.data.trajectories import EpisodeRecord, StepRecord
from agentprm.errors import UserError

MAX_BODY = 64 * 2**20   # bytes: a request larger than this is refused (413) before it is read
BATCH = 64              # (state, action) pairs per forward pass


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{where}: must be a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT:
        raise UserError(f"{where}: {len(value)} characters; at most {MAX_TEXT}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise UserError(f"{where}: not valid Unicode (a lone surrogate)") from None
    return value


def _episode(raw: Any, k: int) -> EpisodeRecord:
    where = f"episodes[{k}]"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be an object with 'task' and 'steps'")
    steps = raw.get("steps")
    if not isinstance(steps, list) or not steps:
        raise UserError(f"{where}.steps: must be a non-empty list")
    records = []
    for t, step in enumerate(steps):
        at = f"{where}.steps[{t}]"
        if not isinstance(step, dict):
            raise UserError(f"{at}: must be an object with 'observation', 'admissible' and 'action'")
        admissible = step.get("admissible", [])
        if not isinstance(admissible, list):
            raise UserError(f"{at}.admissible: must be a list of strings")
        records.append(StepRecord(t, _text(step.get("observation"), f"{at}.observation"),
                                  tuple(_text(a, f"{at}.admissible[{j}]") for j, a in enumerate(admissible)),
                                  _text(step.get("action"), f"{at}.action")))
    task = _text(raw.get("task"), f"{where}.task")
    return EpisodeRecord(f"request-{k}", _text(raw.get("task_id", f"request-{k}"), f"{where}.task_id"), "", task,
                         "client", 0, records)


def batched_scores(critic: Critic, pairs: list, batch: int, lock=None) -> list[float]:
    """Q(s, a) of (state, action) pairs, `batch` per forward pass, each pass inside `lock` (a server's: one pass at a
    time, and a request of many batches lets other requests' passes in between)."""
    scores: list[float] = []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        with lock or nullcontext():
            scores += critic.score([s for s, _ in chunk], [a for _, a in chunk]).tolist()
    return scores


def episode_scores(critic: Critic, episodes: Any, batch: int = BATCH, lock=None) -> list[list[float]]:
    """Q(s_t, a_t) of every turn of each episode (the request format above); a UserError naming the field first."""
    if not isinstance(episodes, list):
        raise UserError("episodes: must be a list")
    records = [_episode(e, k) for k, e in enumerate(episodes)]
    pairs = [list(episode_states(r)) for r in records]
    scores = batched_scores(critic, [p for ps in pairs for p in ps], batch, lock)
    out, at = [], 0
    for ps in pairs:
        out.append(scores[at:at + len(ps)])
        at += len(ps)
    return out


class PRMReward:
    """The PRM as a reward function for TRL's trainers (`GRPOTrainer(reward_funcs=[PRMReward(critic)])`, any trainer
    that calls `f(prompts, completions, **columns) -> list[float]`): each completion is the agent's action, scored
    Q(s, completion) at the state its dataset row describes. The rows carry that state in three columns, which TRL
    hands over as keyword lists: `task` (the goal sentence), `steps` (the turns before this one, as /score's steps:
    observation, admissible, action) and `observation` (what the agent sees now), with `admissible` optional.
    The prompt the policy sees is the trainer's business; the state the PRM scores is rebuilt from the columns, as
    training rebuilt it."""

    COLUMNS = ("task", "steps", "observation")

    def __init__(self, critic: Critic, name: str = "prm_reward", batch: int = BATCH):
        self.critic, self.batch = critic, batch
        self.__name__ = name   # what TRL logs the reward under (rewards/<name>/mean)

    def __call__(self, prompts: list, completions: list, **columns: Any) -> list[float]:
        missing = [c for c in self.COLUMNS if c not in columns]
        if missing:
            raise UserError(f"PRMReward: the dataset has no {', '.join(repr(c) for c in missing)} column(s); each row "
                            "needs task, steps (the turns so far) and observation (docs/prm-as-reward.md)")
        admissible = columns.get("admissible") or [[]] * len(completions)
        pairs = []
        for k, completion in enumerate(completions):
            action = completion[-1]["content"] if isinstance(completion, list) else completion   # chat or text
            steps = list(columns["steps"][k] or []) + [{"observation": columns["observation"][k],
                                                        "admissible": list(admissible[k] or []), "action": action}]
            pairs.append(list(episode_states(_episode({"task": columns["task"][k], "steps": steps}, k)))[-1])
        return batched_scores(self.critic, pairs, self.batch)


class PRMServer(ThreadingHTTPServer):
    """`critic` behind /health and /score on (host, port) — port 0 takes a free one (`server_address` says which)."""
    daemon_threads = True

    def __init__(self, critic: Critic, name: str, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0,
                 token: str = ""):
        """`token`: when set, POST /score needs `Authorization: Bearer <token>` (401 otherwise); /health stays open."""
        self.critic, self.name, self.timeout_s, self.token = critic, name, timeout_s, token
        self.lock = threading.Lock()   # one forward pass at a time: memory stays that of one batch
        try:
            super().__init__((host, port), _Handler)
        except OSError as e:
            raise UserError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class JSONHandler(BaseHTTPRequestHandler):
    """Answers in JSON, and quietly: http.server's line per request on stderr is noise in a trainer's log."""

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        pass


class _Handler(JSONHandler):
    server: PRMServer

    def setup(self) -> None:
        self.timeout = self.server.timeout_s   # a client that stops sending mid-request does not hold a thread
        super().setup()

    def do_GET(self) -> None:   # noqa: N802 (http.server's name)
        if self.path != "/health":
            return self.reply(404, {"error": f"no such endpoint {self.path}; GET /health, POST /score"})
        self.reply(200, {"status": "ok", "prm": self.server.name})

    def do_POST(self) -> None:   # noqa: N802
        if self.path != "/score":
            return self.reply(404, {"error": f"no such endpoint {self.path}; GET /health, POST /score"})
        given = self.headers.get("Authorization", "").encode()
        if self.server.token and not hmac.compare_digest(given, f"Bearer {self.server.token}".encode()):
            self.close_connection = True
            return self.reply(401, {"error": "POST /score needs the header 'Authorization: Bearer <token>'"})
        length = (self.headers.get("Content-Length") or "0").strip()
        if not length.isascii() or not length.isdigit():
            self.close_connection = True   # the body's end is unknown: nothing more is read from this connection
            return self.reply(400, {"error": f"Content-Length must be a number of bytes, got {length[:40]!r}"})
        size = int(length[:20])
        if size > MAX_BODY:
            self.close_connection = True
            return self.reply(413, {"error": f"request of {size} bytes; at most {MAX_BODY}: send fewer episodes"})
        try:
            body = json.loads(self.rfile.read(size) or b"null")
        except UnicodeDecodeError:
            return self.reply(400, {"error": "not valid JSON (the body is not UTF-8)"})
        except json.JSONDecodeError as e:
            return self.reply(400, {"error": f"not valid JSON ({e.msg})"})
        except (ValueError, RecursionError) as e:   # a 5,000-digit number; nesting deeper than the parser goes
            return self.reply(400, {"error": f"not valid JSON ({str(e).splitlines()[0][:120] or 'nested too deeply'})"})
        try:
            if not isinstance(body, dict):
                raise UserError("the request must be a JSON object {\"episodes\": [...]}")
            scores = episode_scores(self.server.critic, body.get("episodes"), lock=self.server.lock)
        except UserError as e:
            return self.reply(400, {"error": " ".join(str(e).splitlines())})
        self.reply(200, {"scores": scores})
