"""Log-likelihood of candidate replies under a causal LM, batched, with the prompt encoded once.

Used by the "choose" decoding mode (pick among the admissible commands) and by DPO/PRM code that needs
log π(reply | state). Token-in-token-out: prompt and reply are tokenised separately and concatenated, so the
scored ids are exactly the ids a trainer sees (no decode/re-encode drift between turns).

A row's score does not depend on what else is in the batch: candidates are packed per prompt behind a 4-D mask
(`score_candidates`), generation left-pads prompts and derives position ids from the attention mask (tests check
batched == one-at-a-time).
"""
from __future__ import annotations

import copy
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
TRAIN_ELEMENTS = 2 ** 20  # reply_logprobs: rows × length² per forward; small forwards of like length beat one padded
                          # forward of all rows on CPU (bench/onpolicy_iteration.py)
PADDING_SLACK = 1.25  # a forward may cost at most this much more than its rows unpadded (cost ~ length^2)
ATTENTION_BUDGET = 8 * 2 ** 30  # bytes of one layer's attention weights a packed row may take (else: `_score_shared`)
CACHE_BUDGET = 2 ** 30  # bytes of repeated KV cache one chunk of `_score_shared` may take


def length_buckets(lengths: Sequence[int], max_elements: int = MAX_MASK_ELEMENTS) -> list[list[int]]:
    """Indices of `lengths` sorted by length and cut into forwards whose padded cost (rows × the longest's length²,
    attention being quadratic) stays within PADDING_SLACK of their rows' own and within `max_elements`: one
    forward over rows of 100 and 400 tokens costs 16× the short one's unpadded."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    buckets, lo = [], 0
    while lo < len(order):
        hi, own = lo + 1, lengths[order[lo]] ** 2
        while hi < len(order):
            longest = lengths[order[hi]] ** 2   # sorted: the newcomer is the longest
            if (hi + 1 - lo) * longest > min(max_elements, PADDING_SLACK * (own + longest)):
                break
            hi, own = hi + 1, own + longest
        buckets.append(order[lo:hi])
        lo = hi
    return buckets


def _memory_per_token(model) -> tuple[float, float]:
    """(bytes of one layer's attention weights per (query, key) pair of a packed row; bytes of the KV cache per
    token over all layers), from the model's config; (0, 0) when the config does not say (never routed away)."""
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", 0) or 0
    if not heads:
        return 0.0, 0.0
    size = next(model.parameters()).element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return heads * size, 2 * kv_heads * head_dim * config.num_hidden_layers * size


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
    a time.

    A packed row's attention weights take heads × length² elements per layer (the dense mask rules out the
    memory-efficient kernels). Where that would exceed ATTENTION_BUDGET bytes — rows of some 17,000 tokens for a
    0.5 B chat model — the row is scored by `_score_shared` instead: the prompt once, then its candidates in chunks on
    the prompt's KV cache repeated per candidate, each chunk within CACHE_BUDGET, so memory grows linearly with the
    prompt and not at all with the number of candidates. Below that, packing is as fast and leaner than sharing the
    cache (bench/model_scale.py, 0.5 B shape with 2 KV heads, 30 candidates at an 8,192-token prompt: packed 61.3 s
    and +0.8 GB; the cache repeated for all 30 at once 62.0 s and +4.1 GB). The scores are the same either way
    (tests/test_lm_agent.py)."""
    rows = [_pack(p, cands) for p, cands in zip(prompt_ids, candidate_ids)]
    scores: list[torch.Tensor | None] = [None] * len(rows)
    attention, cache = _memory_per_token(model)
    for i, row in enumerate(rows):   # a row whose attention would outgrow the budget: share the prompt instead
        if attention * len(row[0]) ** 2 > ATTENTION_BUDGET:
            chunk = max(1, int(CACHE_BUDGET // max(1, 2 * cache * len(prompt_ids[i]))))   # the repeated cache,
            # and its copy when a chunk's own keys are appended to it
            scores[i] = _score_shared(model, prompt_ids[i], candidate_ids[i], chunk)
    todo = [i for i in range(len(rows)) if scores[i] is None]
    for bucket in length_buckets([len(rows[i][0]) for i in todo]):
        for i, score in zip([todo[k] for k in bucket], _score_rows(model, [rows[todo[k]] for k in bucket], pad_id)):
            scores[i] = score
    return scores


def _score_shared(model, prompt: Sequence[int], cands: Sequence[Sequence[int]], chunk: int) -> torch.Tensor:
    """One prompt's candidates against the prompt's KV cache: the prompt in one forward, then the candidates in
    batches of `chunk`, each on its own copy of the cache repeated per candidate, with every candidate's tokens but
    the last (right-padded, positions continuing from the prompt's end). A candidate's first token is predicted by the
    prompt's last position."""
    device = next(model.parameters()).device
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if not cands:
        return torch.zeros(0)
    first = decoder(input_ids=torch.tensor([list(prompt)], device=device), use_cache=True)
    logp_first = F.log_softmax(head(first.last_hidden_state[0, -1]).float(), -1)
    scores = logp_first[torch.tensor([c[0] for c in cands], device=device)].cpu()
    for lo in range(0, len(cands), chunk):
        part = cands[lo:lo + chunk]
        longest = max(len(c) for c in part) - 1
        if longest == 0:
            continue
        ids = torch.zeros((len(part), longest), dtype=torch.long)
        mask = torch.zeros((len(part), len(prompt) + longest), dtype=torch.long)
        mask[:, :len(prompt)] = 1
        for k, c in enumerate(part):
            ids[k, :len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
            mask[k, len(prompt):len(prompt) + len(c) - 1] = 1
        cache = copy.deepcopy(first.past_key_values)
        cache.batch_repeat_interleave(len(part))
        pos = torch.arange(len(prompt), len(prompt) + longest)[None].expand(len(part), -1)
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                         past_key_values=cache, use_cache=False).last_hidden_state
        rows, at, token = [], [], []
        for k, c in enumerate(part):
            for j in range(1, len(c)):   # position j - 1 of the candidate's inputs predicts its token j
                rows.append(lo + k), at.append(j - 1), token.append(c[j])
        logits = head(hidden[torch.tensor(rows, device=device) - lo, torch.tensor(at, device=device)])
        logp = F.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token, device=device)[:, None]).squeeze(-1)
        scores = scores.index_add(0, torch.tensor(rows), logp.cpu())
    return scores


def pack_row(prompt: Sequence[int], pieces: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[int], list[int]]:
    """One packed row: the prompt, then every piece after it. Returns (ids, segment, position, starts): segment 0 =
    the prompt, k = piece k; a piece's positions continue from the prompt's end, as if it followed the prompt alone;
    starts[k - 1] = where piece k begins in the row. `packed_hidden` runs such rows behind the mask that keeps each
    piece to the prompt and its own earlier tokens."""
    ids, seg, pos, starts = list(prompt), [0] * len(prompt), list(range(len(prompt))), []
    for k, piece in enumerate(pieces, 1):
        starts.append(len(ids))
        ids += piece
        seg += [k] * len(piece)
        pos += range(len(prompt), len(prompt) + len(piece))
    return ids, seg, pos, starts


def packed_hidden(decoder, rows: Sequence[tuple[list[int], list[int], list[int], list[int]]], pad_id: int) -> torch.Tensor:
    """Last hidden states (B, width, hidden) of `pack_row` rows, right-padded, through `decoder` (a Hugging Face
    backbone that takes a 4-D float mask: eager or sdpa attention)."""
    device, dtype = next(decoder.parameters()).device, next(decoder.parameters()).dtype
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    seg = torch.full((len(rows), width), -1, dtype=torch.long)   # -1: padding
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r_ids, r_seg, r_pos, _) in enumerate(rows):
        ids[i, :len(r_ids)], seg[i, :len(r_ids)], pos[i, :len(r_ids)] = (
            torch.tensor(r_ids, dtype=torch.long), torch.tensor(r_seg), torch.tensor(r_pos))
    query, key = seg[:, :, None], seg[:, None, :]
    allowed = torch.ones(width, width, dtype=torch.bool).tril() & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool)  # a padding position attends to itself: no all-masked row
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
    return decoder(input_ids=ids.to(device), attention_mask=mask.to(device),
                   position_ids=pos.to(device)).last_hidden_state


def _pack(prompt: Sequence[int], cands: Sequence[Sequence[int]]):
    """A candidate-scoring row: the prompt, then every candidate's tokens but the last (`pack_row`), with
    predictions[k] listing (position whose logits predict the token, token) for candidate k's tokens."""
    ids, seg, pos, starts = pack_row(prompt, [c[:-1] for c in cands])
    predictions = [[(len(prompt) - 1, c[0])] + [(start + j - 1, c[j]) for j in range(1, len(c))]
                   for start, c in zip(starts, cands)]
    return ids, seg, pos, predictions


def _score_rows(model, rows, pad_id: int) -> list[torch.Tensor]:
    device = next(model.parameters()).device
    hidden = packed_hidden(model.get_decoder(), rows, pad_id)
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
    Rows are right-padded prompt⊕reply. The output head runs on the positions that predict a reply token only: a
    chat model's vocabulary is ~150,000 wide, and its logits over every prompt position were most of a DPO step's
    memory (bench/model_scale.py)."""
    device = next(model.parameters()).device
    seqs = [list(p) + list(r) for p, r in zip(prompt_ids, reply_ids)]
    out = torch.zeros(len(seqs), device=device, dtype=torch.float32)
    for bucket in length_buckets([len(s) for s in seqs], TRAIN_ELEMENTS):
        ids, mask = right_pad([seqs[i] for i in bucket], pad_id)
        hidden = model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        row, at, token = [], [], []
        for k, i in enumerate(bucket):
            for j, t in enumerate(reply_ids[i]):   # position len(prompt) - 1 + j predicts the reply's token j
                row.append(k), at.append(len(prompt_ids[i]) - 1 + j), token.append(t)
        if not row:
            continue
        logits = model.get_output_embeddings()(hidden[torch.tensor(row, device=device), torch.tensor(at, device=device)])
        logp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token, device=device)[:, None]).squeeze(-1)
        owner = torch.tensor(bucket, device=device)[torch.tensor(row, device=device)]
        out = out.index_add(0, owner, logp)
    return out
