"""Log-likelihood of candidate replies under a causal LM, batched, with the prompt encoded once.

Used by the "choose" decoding mode (pick among the admissible commands) and by DPO/PRM code that needs
log π(reply | state). Token-in-token-out: prompt and reply are tokenised separately and concatenated, so the
scored ids are exactly the ids a trainer sees (no decode/re-encode drift between turns).

A row's score does not depend on what else is in the batch: candidates are packed per prompt behind a 4-D mask
(`score_candidates`), generation left-pads prompts and derives position ids from the attention mask (tests check
batched == one-at-a-time).
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


MAX_MASK_ELEMENTS = 2 ** 25  # packed rows per forward: batch x length^2 of the 4-D mask stays under this
PADDING_SLACK = 1.25  # a forward may cost at most this much more than its rows unpadded (cost ~ length^2)


@torch.no_grad()
def score_candidates(model, prompt_ids: Sequence[Sequence[int]], candidate_ids: Sequence[Sequence[Sequence[int]]],
                     pad_id: int) -> list[torch.Tensor]:
    """Sum of token log-probs of each candidate given its prompt: one tensor of shape (n_candidates,) per prompt.

    Each prompt and all its candidates go into one packed row, prompt first, then every candidate's tokens but
    the last; a 4-D attention mask lets a candidate see the prompt and its own earlier tokens only, and its
    position ids continue from the prompt's end, so it is scored exactly as if it followed the prompt alone.
    One forward per batch of rows, with no per-candidate copy of the prompt's KV cache (2.8x faster on CPU with
    12 prompts and 271 admissible commands). Needs an attention implementation that takes a 4-D mask (eager or
    sdpa, the Hugging Face default).

    A forward costs its longest row's length squared for every row (the mask is dense), and packed rows differ a
    lot in length (a state has 10 to 40 admissible commands), so rows are sorted by length and cut into forwards whose
    padded cost stays within PADDING_SLACK of their own: batching all of them at once was slower than one row at
    a time."""
    rows = [_pack(p, cands) for p, cands in zip(prompt_ids, candidate_ids)]
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    scores: list[torch.Tensor | None] = [None] * len(rows)
    lo = 0
    while lo < len(order):
        hi, own = lo + 1, len(rows[order[lo]][0]) ** 2
        while hi < len(order):
            longest = len(rows[order[hi]][0]) ** 2  # sorted: the newcomer is the longest
            if (hi + 1 - lo) * longest > min(MAX_MASK_ELEMENTS, PADDING_SLACK * (own + longest)):
                break
            hi, own = hi + 1, own + longest
        for i, score in zip(order[lo:hi], _score_rows(model, [rows[i] for i in order[lo:hi]], pad_id)):
            scores[i] = score
        lo = hi
    return scores


def _pack(prompt: Sequence[int], cands: Sequence[Sequence[int]]):
    """(ids, segment, position, predictions): segment 0 = prompt, k = candidate k; predictions[k] lists
    (position whose logits predict the token, token) for candidate k's tokens."""
    ids, seg, pos = list(prompt), [0] * len(prompt), list(range(len(prompt)))
    predictions = []
    for k, c in enumerate(cands, 1):
        start = len(ids)
        ids += c[:-1]
        seg += [k] * (len(c) - 1)
        pos += range(len(prompt), len(prompt) + len(c) - 1)
        predictions.append([(len(prompt) - 1, c[0])] + [(start + j - 1, c[j]) for j in range(1, len(c))])
    return ids, seg, pos, predictions


def _score_rows(model, rows, pad_id: int) -> list[torch.Tensor]:
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    seg = torch.full((len(rows), width), -1, dtype=torch.long)   # -1: padding
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r_ids, r_seg, r_pos, _) in enumerate(rows):
        ids[i, :len(r_ids)], seg[i, :len(r_ids)], pos[i, :len(r_ids)] = (
            torch.tensor(r_ids), torch.tensor(r_seg), torch.tensor(r_pos))
    query, key = seg[:, :, None], seg[:, None, :]
    allowed = torch.ones(width, width, dtype=torch.bool).tril() & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool)  # a padding position attends to itself: no all-masked row
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
    hidden = model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 position_ids=pos.to(device)).last_hidden_state
    owner, at, token, sizes = [], [], [], []
    for i, (*_, predictions) in enumerate(rows):
        for cand in predictions:
            sizes.append(len(cand))
            for p, t in cand:
                owner.append(i), at.append(p), token.append(t)
    if not sizes:
        return [torch.zeros(0) for _ in rows]
    logits = model.get_output_embeddings()(hidden[torch.tensor(owner, device=device), torch.tensor(at, device=device)])
    logp = F.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token, device=device)[:, None]).squeeze(-1)
    per_cand = torch.stack([t.sum() for t in torch.split(logp.cpu(), sizes)])
    return list(torch.split(per_cand, [len(r[3]) for r in rows]))


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
