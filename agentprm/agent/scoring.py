"""Log-likelihood of candidate replies under a causal LM, batched, with the prompt encoded once.

Used by the "choose" decoding mode (pick among the admissible commands) and by DPO/PRM code that needs
log π(reply | state). Token-in-token-out: prompt and reply are tokenised separately and concatenated, so the
scored ids are exactly the ids a trainer sees (no decode/re-encode drift between turns).

Prompts are left-padded and position ids are derived from the attention mask, so a row's score does not depend
on what else is in the batch (tests check batched == one-at-a-time).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
    return ids, mask


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


def positions(mask: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    pos = mask.cumsum(-1) - 1
    if offset is not None:
        pos = pos + offset[:, None]
    return pos.clamp(min=0)


@torch.no_grad()
def score_candidates(model, prompt_ids: Sequence[Sequence[int]], candidate_ids: Sequence[Sequence[Sequence[int]]],
                     pad_id: int, chunk: int = 512) -> list[torch.Tensor]:
    """Sum of token log-probs of each candidate given its prompt: one tensor of shape (n_candidates,) per prompt."""
    device = next(model.parameters()).device
    p_ids, p_mask = left_pad(prompt_ids, pad_id)
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=positions(p_mask), use_cache=True)
    first_logp = F.log_softmax(out.logits[:, -1].float(), -1)          # next-token dist after each prompt
    cache, prompt_len = out.cache, p_mask.sum(-1)
    owners = [i for i, cands in enumerate(candidate_ids) for _ in cands]
    flat = [c for cands in candidate_ids for c in cands]
    scores = torch.empty(len(flat))
    for lo in range(0, len(flat), chunk):
        idx = torch.tensor(owners[lo:lo + chunk], device=device)
        scores[lo:lo + chunk] = _score_chunk(model, cache, idx, p_mask, prompt_len, first_logp,
                                             flat[lo:lo + chunk], pad_id)
    return list(torch.split(scores, [len(c) for c in candidate_ids]))


def _score_chunk(model, cache, idx, p_mask, prompt_len, first_logp, cands, pad_id) -> torch.Tensor:
    c_ids, c_mask = right_pad(cands, pad_id)
    c_ids, c_mask = c_ids.to(idx.device), c_mask.to(idx.device)
    logp = first_logp[idx].gather(-1, c_ids[:, :1]).squeeze(-1)
    if c_ids.shape[1] > 1:
        sub = _select(cache, idx)
        mask = torch.cat([p_mask[idx], c_mask[:, :-1]], dim=1)
        out = model(input_ids=c_ids[:, :-1], attention_mask=mask, cache=sub,
                    position_ids=positions(c_mask[:, :-1], prompt_len[idx]), use_cache=True)
        tok = F.log_softmax(out.logits.float(), -1).gather(-1, c_ids[:, 1:, None]).squeeze(-1)
        logp = logp + (tok * c_mask[:, 1:]).sum(-1)
    return logp.cpu()


def _select(cache, idx: torch.Tensor):
    """A copy of the prompt cache with rows repeated/selected for this chunk of candidates."""
    from transformers import DynamicCache

    layers = [(layer.keys.index_select(0, idx), layer.values.index_select(0, idx)) for layer in cache.layers]
    new = DynamicCache()
    for i, (k, v) in enumerate(layers):
        new.update(k, v, i)
    return new


def reply_logprobs(model, prompt_ids: Sequence[Sequence[int]], reply_ids: Sequence[Sequence[int]],
                   pad_id: int) -> torch.Tensor:
    """log π(reply | prompt) summed over reply tokens, with gradients (DPO, policy-gradient losses), shape (B,).
    Rows are right-padded prompt⊕reply; only reply positions count."""
    device = next(model.parameters()).device
    seqs = [list(p) + list(r) for p, r in zip(prompt_ids, reply_ids)]
    ids, mask = right_pad(seqs, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    tok_logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    reply_mask = torch.zeros_like(mask)
    for i, (p, r) in enumerate(zip(prompt_ids, reply_ids)):
        reply_mask[i, len(p):len(p) + len(r)] = 1
    return (tok_logp * reply_mask[:, 1:]).sum(-1)
