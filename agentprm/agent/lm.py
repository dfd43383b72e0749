"""LM policies: a causal LM behind a small generation-backend interface, acting as an `Agent`.

    agent = LMAgent.load("agentprm/assets/policy", mode="choose")        # any saved policy folder
    replies = agent.act(states, turns)                                    # one batched model call per turn
    samples = agent.sample(states, turns, n=8)                            # N replies per state (Best-of-N)

Two decoding modes:
  "choose"   score every admissible command (reply = `format_reply(cmd)`) by its log-likelihood given the prompt;
             greedy argmax at temperature 0, else a sample from softmax(logp / T). Never inadmissible.
  "generate" free generation (KV cache, left-padded prompts, position ids from the attention mask, so a row's
             tokens do not depend on the rest of the batch); the engine parses the text with `parse_reply`.
`Decoding` holds the rest of the sampling settings (the loop's `decoding:` section, the commands' flags): top-k and
top-p restrict what a sample is drawn from in both modes (over the vocabulary, or over the admissible commands);
`max_new_tokens` and `stop` strings end a generated reply.

Backends take and return token ids (token-in-token-out, see agent/encoding.py), so a trainer later sees exactly
the ids that were sampled. `HFBackend` runs a local Hugging Face model in-process; `OpenAIBackend`
(agent/remote.py) asks an OpenAI-compatible server such as vLLM. Other backends plug in by implementing the same
two methods.
"""
from __future__ import annotations

import copy
import inspect
import random
from pathlib import Path
from typing import Protocol, Sequence

import torch
import torch.nn.functional as F

from agentprm.agent.decoding import Decoding
from agentprm.agent.encoding import PromptConfig, check_policy_folder, end_of_turn_id, prompt_ids, reply_ids
from agentprm.agent.format import format_reply
from agentprm.agent.remote import BackendConfig, OpenAIBackend, server_urls
from agentprm.agent.replicas import ray_replicas, server_replicas
from agentprm.agent.scoring import left_pad, positions, score_candidates
from agentprm.agent.state import AgentState
from agentprm.envs.base import Turn
from agentprm.envs.pool import configured_ray_address
from agentprm.errors import UserError

MODES = ("choose", "generate")


def restrict(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """`logits` (..., V) with everything outside the top-k and the top-p nucleus set to -inf (the likeliest entry is
    always kept): applied after the temperature, as Hugging Face's samplers do."""
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = ordered.softmax(-1)
        outside = probs.cumsum(-1) - probs >= top_p       # the mass before an entry already reaches top_p
        logits = logits.scatter(-1, order, ordered.masked_fill(outside, float("-inf")))
    return logits


class GenerationBackend(Protocol):
    def score(self, prompt_ids: Sequence[Sequence[int]],
              candidate_ids: Sequence[Sequence[Sequence[int]]]) -> list[torch.Tensor]:
        """Sum of token log-probs of each candidate given its prompt: a (n_candidates,) tensor per prompt."""
        ...

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, temperature: float, max_new_tokens: int,
                 seed: int, top_k: int = 0, top_p: float = 1.0) -> list[list[list[int]]]:
        """`n` completions per prompt (token ids, ending at and including EOS if it was produced); greedy at
        temperature 0, else sampled within `top_k`/`top_p` (`restrict`); the same seed gives the same completions."""
        ...


class HFBackend:
    """A local Hugging Face causal LM, run in this process."""

    def __init__(self, model, pad_id: int, eos_id: int, stop_ids: Sequence[int] = ()):
        """`stop_ids`: more tokens that end a completion (kept, like the end-of-turn token) — e.g. a newline, to
        generate one reasoning step at a time (reason/search.py)."""
        self.model, self.pad_id, self.eos_id = model.eval(), pad_id, eos_id
        self.stops = frozenset({eos_id, *stop_ids})
        # the prompt's forward needs only the last position's logits (most HF causal LMs take logits_to_keep)
        self._last_logits = ({"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters
                             else {})

    def score(self, prompt_ids, candidate_ids) -> list[torch.Tensor]:
        return score_candidates(self.model, prompt_ids, candidate_ids, self.pad_id)

    @torch.inference_mode()
    def generate(self, prompt_ids, n, temperature, max_new_tokens, seed, top_k=0, top_p=1.0) -> list[list[list[int]]]:
        device = next(self.model.parameters()).device
        rows = [p for p in prompt_ids for _ in range(n)]
        ids, mask = (t.to(device) for t in left_pad(rows, self.pad_id))
        width = ids.shape[1]
        gen = torch.Generator(device=device).manual_seed(seed)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True,
                         **self._last_logits)
        next_pos = mask.sum(-1)
        mask = torch.cat([mask, mask.new_ones(len(rows), max_new_tokens)], 1)  # sliced per step, not regrown
        done = torch.zeros(len(rows), dtype=torch.bool, device=device)
        stops = torch.tensor(sorted(self.stops), device=device)
        tokens = []
        for step in range(max_new_tokens):
            logits = out.logits[:, -1].float()
            if temperature > 0:
                probs = F.softmax(restrict(logits / temperature, top_k, top_p), -1)
                tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            else:
                tok = logits.argmax(-1)
            tok = tok.masked_fill(done, self.pad_id)
            tokens.append(tok)
            done |= torch.isin(tok, stops)
            if done.all():
                break
            out = self.model(input_ids=tok[:, None], attention_mask=mask[:, :width + step + 1],
                             position_ids=next_pos[:, None], cache=out.cache, use_cache=True)
            next_pos = next_pos + 1
        seqs = torch.stack(tokens, 1).tolist() if tokens else [[] for _ in rows]
        completions = [_until_stop(s, self.stops) for s in seqs]
        return [completions[i * n:(i + 1) * n] for i in range(len(prompt_ids))]


def _until_stop(seq: list[int], stops: frozenset[int]) -> list[int]:
    """The completion up to and including its first stop token (the rest is padding)."""
    end = next((k for k, t in enumerate(seq) if t in stops), None)
    return seq if end is None else seq[:end + 1]


class LMAgent:
    """An `Agent` backed by a causal LM. `model` is a `GenerationBackend` or a Hugging Face model (wrapped in
    `HFBackend`). Sampling draws its seeds from one RNG seeded with `seed`, so a run is reproducible."""

    needs_expert = False

    def __init__(self, model, tokenizer, prompt_cfg: PromptConfig | None = None, *, mode: str = "choose",
                 temperature: float = 0.0, seed: int = 0, name: str = "lm", decoding: Decoding | None = None,
                 distinct: bool = False):
        """`distinct` (choose mode): `sample(n)` draws n *different* admissible commands (without replacement from
        softmax(logp / T); the top n at T = 0), fewer when a state has fewer, so every state with two commands
        yields two candidates to compare (a Best-of-N or a DPO pair); otherwise draws are independent."""
        if mode not in MODES:
            raise UserError(f"unknown decoding mode {mode!r}; known: {', '.join(MODES)}")
        if temperature < 0:
            raise UserError(f"temperature must be >= 0 (got {temperature})")
        is_backend = hasattr(model, "score") and hasattr(model, "generate") and not isinstance(model, torch.nn.Module)
        self.backend = model if is_backend else HFBackend(model, tokenizer.pad_token_id, end_of_turn_id(tokenizer))
        self.tokenizer, self.prompt_cfg = tokenizer, prompt_cfg or PromptConfig()
        self.mode, self.temperature, self.name, self.decoding = mode, temperature, name, decoding or Decoding()
        if distinct and mode != "choose":
            raise UserError("distinct samples need decoding mode 'choose' (free generation can repeat itself)")
        self.distinct = distinct
        self._rng = random.Random(seed)
        self._reply_ids: dict[str, list[int]] = {}   # admissible commands repeat across turns and envs

    @classmethod
    def load(cls, folder: str | Path, backend=None, **overrides) -> LMAgent:
        """A policy folder (HF model + tokenizer + agentprm.json); `overrides` are constructor keywords. `backend`
        (agent/remote.py BackendConfig) `openai` leaves the model to a server serving that folder (or to several:
        agent/replicas.py), and `replicas: N` to N Ray actors; `backend` may also be a GenerationBackend already
        serving the folder (the loop's, kept while the policy plays). Then only the tokenizer and prompt settings
        are read here."""
        from agentprm.models import load_causal_lm, load_tokenizer, resolve_model

        folder = resolve_model(folder)   # a folder, or a packaged model's name (smollm2-135m)
        check_policy_folder(folder)
        if backend is not None and not isinstance(backend, BackendConfig):   # a backend already serving `folder`
            model, tokenizer = backend, load_tokenizer(folder)
        elif backend is not None and backend.backend == "openai":
            tokenizer = load_tokenizer(folder)
            several = len(server_urls(backend.base_url)) > 1
            model = (server_replicas if several else OpenAIBackend)(backend, tokenizer, folder, end_of_turn_id(tokenizer))
        elif backend is not None and backend.replicas > 1:
            model, tokenizer = ray_replicas(folder, backend.replicas, configured_ray_address()), load_tokenizer(folder)
        else:   # the model first: its loader turns a broken folder into a one-line error
            model, tokenizer = load_causal_lm(folder), load_tokenizer(folder)
        overrides.setdefault("name", folder.resolve().name)
        return cls(model, tokenizer, PromptConfig.load(folder), **overrides)

    def fork(self, seed: int) -> LMAgent:
        """This agent with a sampling stream of its own, seeded with `seed`, sharing the model: episodes played
        concurrently each draw from their own stream, so what they sample does not depend on how their turns
        interleave (search/beam.py)."""
        twin = copy.copy(self)
        twin._rng = random.Random(seed)
        return twin

    def act(self, states: Sequence[AgentState], turns: Sequence[Turn]) -> list[str]:
        return [replies[0] for replies in self.sample(states, turns, 1)]

    def sample(self, states: Sequence[AgentState], turns: Sequence[Turn], n: int,
               steered: Sequence[bool] | None = None) -> list[list[str]]:
        """`n` replies per state, all states in one batched backend call; `steered[k]` prompts state k with the
        steered-exploration variant."""
        if not states:
            return []
        steered = steered or [False] * len(states)
        prompts = [prompt_ids(self.tokenizer, s, self.prompt_cfg, st) for s, st in zip(states, steered)]
        seed = self._rng.getrandbits(63)
        if self.mode == "generate":
            d = self.decoding
            # passed only when set: a backend written before the protocol had them keeps working at the defaults
            extra = {"top_k": d.top_k, "top_p": d.top_p} if (d.top_k, d.top_p) != (0, 1.0) else {}
            out = self.backend.generate(prompts, n, self.temperature, d.max_new_tokens, seed, **extra)
            return [[self._cut(self.tokenizer.decode(ids, skip_special_tokens=True)) for ids in row] for row in out]
        commands = [list(s.admissible) for s in states]
        candidates = [[self._ids(format_reply(c)) for c in cmds] for cmds in commands]
        scores = self.backend.score(prompts, candidates)
        gen = torch.Generator().manual_seed(seed)
        return [[cmds[i] for i in self._pick(logp, n, gen)] for cmds, logp in zip(commands, scores)]

    def _pick(self, logp: torch.Tensor, n: int, gen: torch.Generator) -> list[int]:
        if self.distinct:
            n = min(n, len(logp))
            if self.temperature == 0:
                return logp.topk(n).indices.tolist()
        elif self.temperature == 0:
            return [int(logp.argmax())] * n
        probs = F.softmax(restrict(logp.float() / self.temperature, self.decoding.top_k, self.decoding.top_p), -1)
        if self.distinct:
            n = min(n, int((probs > 0).sum()))   # top-k/top-p may leave fewer commands than asked for
        return torch.multinomial(probs, n, replacement=not self.distinct, generator=gen).tolist()

    def _cut(self, reply: str) -> str:
        """A generated reply up to the first stop string."""
        for stop in self.decoding.stop:
            reply = reply.split(stop, 1)[0] if stop else reply
        return reply

    def _ids(self, reply: str) -> list[int]:
        if reply not in self._reply_ids:
            self._reply_ids[reply] = reply_ids(self.tokenizer, reply)
        return self._reply_ids[reply]
