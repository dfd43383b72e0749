"""LMAgent on a tiny untrained model: batching does not change greedy actions, choose mode stays admissible,
sampling is seeded, cached generation matches plain greedy decoding, policy folders load."""
import pytest
import torch

from agentprm.agent.encoding import PromptConfig, prompt_ids
from agentprm.agent.lm import Decoding, HFBackend, LMAgent, restrict
from agentprm.agent.policies import ExpertAgent
from agentprm.agent.replay import episode_states
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.alfworld.tasks import load_tasks
from agentprm.envs.base import Turn
from agentprm.errors import UserError
from agentprm.models import build_model
from agentprm.rollout.engine import episode_jobs, run_episodes

torch.set_num_threads(1)
MODES = ("choose", "generate")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_model("tiny", tok, seed=0).eval()


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory, model, tok):
    folder = tmp_path_factory.mktemp("policy")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    PromptConfig(history_turns=1).save(folder)
    return folder


@pytest.fixture(scope="module")
def tasks(generated_tasks):
    return load_tasks(generated_tasks.train)[:3]


@pytest.fixture(scope="module")
def states_turns(tasks):
    """Varied states: the first 4 expert steps of 3 games."""
    episodes = run_episodes(episode_jobs(tasks, 1, 0, 4, "t"), ExpertAgent(), num_envs=3, num_workers=1,
                            progress=False)
    pairs = [(s, Turn(s.task, s.observation, s.admissible)) for e in episodes for s, _ in episode_states(e)]
    return [s for s, _ in pairs], [t for _, t in pairs]


def agent(model, tok, **kw) -> LMAgent:
    return LMAgent(model, tok, PromptConfig(), decoding=Decoding(max_new_tokens=8), **kw)


@pytest.mark.parametrize("mode", MODES)
def test_batched_act_equals_one_at_a_time(model, tok, states_turns, mode):
    states, turns = states_turns
    a = agent(model, tok, mode=mode)
    assert a.act(states, turns) == [a.act([s], [t])[0] for s, t in zip(states, turns)]


@pytest.mark.parametrize("mode", MODES)
def test_batched_rollouts_equal_one_env_at_a_time(policy_dir, tasks, mode):
    play = lambda num_envs: run_episodes(episode_jobs(tasks[:2], 1, 0, 3, "t"), LMAgent.load(policy_dir, mode=mode,
                                         decoding=Decoding(max_new_tokens=8)), num_envs=num_envs, num_workers=1, progress=False)
    batched, single = play(2), play(1)
    assert [[s.action for s in e.steps] for e in batched] == [[s.action for s in e.steps] for e in single]
    assert all(len(e.steps) == 3 for e in batched)


def test_rollouts_on_a_reused_pool_equal_rollouts_on_fresh_pools(tasks):
    from agentprm.envs.pool import EnvPool

    jobs = episode_jobs(tasks[:3], 1, 0, 4, "t")
    fresh = run_episodes(jobs, ExpertAgent(), num_envs=2, num_workers=1, progress=False)
    with EnvPool(1, num_slots=2) as pool:
        reused = [run_episodes(jobs, ExpertAgent(), pool=pool, progress=False) for _ in range(2)]
    assert all([e.rows() for e in r] == [e.rows() for e in fresh] for r in reused)


def test_choose_mode_picks_admissible_commands(model, tok, states_turns):
    states, turns = states_turns
    for temperature in (0.0, 1.0):
        for state, replies in zip(states, agent(model, tok, temperature=temperature).sample(states, turns, 5)):
            assert set(replies) <= set(state.admissible)


@pytest.mark.parametrize("mode", MODES)
def test_sampling_is_seeded_and_gives_n_per_state(model, tok, states_turns, mode):
    states, turns = states_turns
    draw = lambda seed: agent(model, tok, mode=mode, temperature=1.0, seed=seed).sample(states, turns, 4)
    first = draw(3)
    assert first == draw(3)
    assert first != draw(4)
    assert len(first) == len(states) and all(len(r) == 4 for r in first)
    assert any(len(set(r)) > 1 for r in first)  # the N samples of a state differ


def test_greedy_at_temperature_zero_repeats_one_reply(model, tok, states_turns):
    states, turns = states_turns
    for replies in agent(model, tok).sample(states[:3], turns[:3], 3):
        assert len(set(replies)) == 1


def test_packed_candidate_scores_equal_plain_forward_passes(model, tok, states_turns):
    """Packing a prompt and all its candidates behind a 4-D mask scores each candidate exactly as a plain forward
    over prompt + candidate does, also when the mask budget splits the batch, whatever the order of the rows."""
    from agentprm.agent import scoring
    from agentprm.agent.encoding import reply_ids

    states = states_turns[0][:4]
    prompts = [prompt_ids(tok, s, PromptConfig()) for s in states]
    cands = [[reply_ids(tok, a) for a in s.admissible] for s in states]
    got = scoring.score_candidates(model, prompts, cands, tok.pad_token_id)
    for prompt, cs, scores in zip(prompts, cands, got):
        assert scores.shape == (len(cs),)
        for c, score in zip(cs, scores):
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([list(prompt) + c])).logits[0].float(), -1)
            want = sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(c))
            assert float(score) == pytest.approx(want, abs=1e-4)
    budget = scoring.MAX_MASK_ELEMENTS
    try:
        scoring.MAX_MASK_ELEMENTS = 1   # one prompt per forward
        split = scoring.score_candidates(model, prompts, cands, tok.pad_token_id)
    finally:
        scoring.MAX_MASK_ELEMENTS = budget
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, split))
    # rows are scored sorted by length (at most 25% padding per forward); the scores come back in input order
    assert len({len(p) + sum(map(len, cs)) for p, cs in zip(prompts, cands)}) > 1
    flipped = scoring.score_candidates(model, prompts[::-1], cands[::-1], tok.pad_token_id)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got[::-1], flipped))


def test_long_rows_score_on_the_shared_prompt_cache_with_the_same_scores(model, tok, states_turns, monkeypatch):
    """a packed row whose attention would pass ATTENTION_BUDGET scores its candidates on the prompt's KV
    cache, in chunks whose repeated cache fits the budget: the scores equal the packed ones (single-token candidates,
    a mix of long and short rows, one candidate per chunk)."""
    from agentprm.agent import scoring
    from agentprm.agent.encoding import reply_ids

    states = states_turns[0][:4]
    prompts = [prompt_ids(tok, s, PromptConfig()) for s in states]
    cands = [[reply_ids(tok, a) for a in s.admissible] for s in states]
    cands[1] = [c[:1] for c in cands[1]]   # one token each: only the prompt's forward scores them
    with torch.no_grad():
        packed = scoring.score_candidates(model, prompts, cands, tok.pad_token_id)
        lengths = sorted(len(p) + sum(len(c) - 1 for c in cs) for p, cs in zip(prompts, cands))
        attention, cache = scoring._memory_per_token(model)
        assert attention == model.config.num_attention_heads * 4 and cache > 0
        calls = []
        shared = scoring._score_shared
        monkeypatch.setattr(scoring, "_score_shared", lambda m, p, c, k: calls.append(k) or shared(m, p, c, k))
        monkeypatch.setattr(scoring, "ATTENTION_BUDGET", attention * lengths[1] ** 2)   # the two longer rows
        mixed = scoring.score_candidates(model, prompts, cands, tok.pad_token_id)
        chunk = max(1, int(scoring.CACHE_BUDGET // (2 * cache * min(map(len, prompts)))))
        assert len(calls) == 2 and max(calls) <= chunk
        monkeypatch.setattr(scoring, "ATTENTION_BUDGET", 0)   # every row through the cache, one candidate at a time
        monkeypatch.setattr(scoring, "CACHE_BUDGET", 0)
        calls.clear()
        cached = scoring.score_candidates(model, prompts, cands, tok.pad_token_id)
    assert calls == [1] * len(prompts)
    for a, b, c in zip(packed, mixed, cached):
        assert torch.allclose(a, b, atol=1e-4) and torch.allclose(a, c, atol=1e-4)


def test_reply_logprobs_equal_a_plain_forward_with_gradients(model, tok, states_turns):
    """The output head runs on reply positions only: the sums equal log-softmax over a plain forward's logits."""
    from agentprm.agent.encoding import reply_ids
    from agentprm.agent.scoring import reply_logprobs

    states = states_turns[0][:3]
    prompts = [prompt_ids(tok, s, PromptConfig()) for s in states]
    replies = [reply_ids(tok, s.admissible[0]) for s in states]
    got = reply_logprobs(model, prompts, replies, tok.pad_token_id)
    for p, r, value in zip(prompts, replies, got):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([list(p) + list(r)])).logits[0].float(), -1)
        assert float(value) == pytest.approx(sum(float(logp[len(p) - 1 + j, t]) for j, t in enumerate(r)), abs=1e-4)
    got.sum().backward()
    assert model.get_output_embeddings().weight.grad is not None
    model.zero_grad(set_to_none=True)


def test_length_buckets_partition_rows_by_length_within_their_cost():
    from agentprm.agent.scoring import PADDING_SLACK, length_buckets

    lengths = [7, 300, 12, 299, 8, 150, 301, 9, 151, 10]
    buckets = length_buckets(lengths, max_elements=2 * 301 ** 2)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for b in buckets:
        longest = max(lengths[i] for i in b)
        assert [lengths[i] for i in b] == sorted(lengths[i] for i in b)
        assert len(b) == 1 or len(b) * longest ** 2 <= min(2 * 301 ** 2, PADDING_SLACK * sum(lengths[i] ** 2 for i in b))
    # the three ~300-token rows may not share a forward (3 × 301² > the cap), and no short row rides with a long one
    assert max(len(b) for b in buckets if lengths[b[0]] >= 299) == 2
    assert all(max(lengths[i] for i in b) < 2 * min(lengths[i] for i in b) for b in buckets)


def test_reply_logprobs_over_mixed_lengths_equal_each_row_alone_with_equal_gradients(model, tok, states_turns,
                                                                                     monkeypatch):
    """Rows of unlike length are scored in several length-bucketed forwards; each sum and the gradient of their
    total equal what each row alone gives."""
    from agentprm.agent import scoring
    from agentprm.agent.encoding import reply_ids

    states = [s for turns in states_turns for s in turns][:12]
    prompts = [prompt_ids(tok, s, PromptConfig())[: 20 + 9 * k] for k, s in enumerate(states)]
    replies = [reply_ids(tok, s.admissible[k % len(s.admissible)]) for k, s in enumerate(states)]
    monkeypatch.setattr(scoring, "TRAIN_ELEMENTS", 4 * max(len(p) + len(r) for p, r in zip(prompts, replies)) ** 2)
    assert len(scoring.length_buckets([len(p) + len(r) for p, r in zip(prompts, replies)], scoring.TRAIN_ELEMENTS)) > 2
    got = scoring.reply_logprobs(model, prompts, replies, tok.pad_token_id)
    got.sum().backward()
    grad = model.get_output_embeddings().weight.grad.clone()
    model.zero_grad(set_to_none=True)
    alone = torch.cat([scoring.reply_logprobs(model, [p], [r], tok.pad_token_id) for p, r in zip(prompts, replies)])
    alone.sum().backward()
    assert torch.allclose(got, alone, atol=1e-4)
    assert torch.allclose(grad, model.get_output_embeddings().weight.grad, atol=1e-4)
    model.zero_grad(set_to_none=True)


def test_sft_loss_equals_the_models_own_loss_over_reply_tokens(model, tok, states_turns):
    from agentprm.agent.encoding import reply_ids
    from agentprm.agent.scoring import right_pad
    from agentprm.policy.sft import IGNORE, Example, sft_loss

    states = states_turns[0][:3]
    batch = []
    for s in states:
        p, r = prompt_ids(tok, s, PromptConfig()), reply_ids(tok, s.admissible[0])
        batch.append(Example(p + r, [IGNORE] * len(p) + r))
    loss, metrics = sft_loss(model, batch)
    ids, mask = right_pad([e.input_ids for e in batch], 0)
    labels, _ = right_pad([e.labels for e in batch], IGNORE)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert float(loss) == pytest.approx(float(want), rel=1e-5)
    assert metrics["weight"] == sum(len(reply_ids(tok, s.admissible[0])) for s in states)


def test_cached_batched_generation_equals_plain_greedy_decoding(model, tok, states_turns):
    prompts = [prompt_ids(tok, s, PromptConfig()) for s in states_turns[0][:4]]
    backend = HFBackend(model, tok.pad_token_id, tok.eos_token_id)
    got = backend.generate(prompts, 1, 0.0, 6, seed=0)
    for prompt, (completion,) in zip(prompts, got):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(6):   # no cache, no padding: the reference
                nxt = int(model(torch.tensor([ids])).logits[0, -1].argmax())
                ids.append(nxt)
                if nxt == tok.eos_token_id:
                    break
        assert completion == ids[len(prompt):]


def test_load_reads_prompt_config_and_overrides(policy_dir, states_turns):
    a = LMAgent.load(policy_dir, mode="generate", temperature=0.5, name="pi0")
    assert (a.prompt_cfg.history_turns, a.mode, a.temperature, a.name) == (1, "generate", 0.5, "pi0")
    assert LMAgent.load(policy_dir).name == policy_dir.name
    states, turns = states_turns
    assert len(a.act(states[:2], turns[:2])) == 2


def test_bad_mode_or_temperature_is_a_user_error(model, tok):
    with pytest.raises(UserError, match="mode"):
        agent(model, tok, mode="beam")
    with pytest.raises(UserError, match="temperature"):
        agent(model, tok, temperature=-1)


def test_restrict_keeps_the_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    kept = lambda x=logits, **kw: torch.isfinite(restrict(x, **kw)).squeeze(0).tolist()  # noqa: E731
    assert kept(top_k=2) == [True, True, False, False]
    assert kept(torch.log(torch.tensor([[0.5, 0.2, 0.2, 0.1]])), top_k=2) == [True, True, True, False]   # k-th's tie
    assert kept(top_p=0.5) == [True, False, False, False]             # 0.5 alone reaches 0.5
    assert kept(top_p=0.6) == [True, True, False, False]
    assert kept(top_p=0.8) == [True, True, True, False]               # 0.75 before the third is short of 0.8
    assert kept(top_p=1e-9) == [True, False, False, False]            # the likeliest is always kept
    assert kept(top_k=3, top_p=0.99) == [True, True, True, False] and kept() == [True] * 4
    torch.testing.assert_close(restrict(logits, top_k=3)[0, :3], logits[0, :3])   # kept entries are unchanged


@pytest.mark.parametrize("mode", MODES)
def test_top_k_one_samples_the_greedy_reply_at_any_temperature(model, tok, states_turns, mode):
    """top-k = 1 in both modes (over the vocabulary, over the admissible commands) leaves one choice: greedy's."""
    states, turns = states_turns
    greedy = agent(model, tok, mode=mode).act(states, turns)
    hot = LMAgent(model, tok, PromptConfig(), mode=mode, temperature=5.0, seed=3,
                  decoding=Decoding(max_new_tokens=8, top_k=1))
    assert all(replies == [g] * 3 for replies, g in zip(hot.sample(states, turns, 3), greedy))
    nucleus = LMAgent(model, tok, PromptConfig(), mode=mode, temperature=5.0, seed=3,
                      decoding=Decoding(max_new_tokens=8, top_p=1e-6))
    assert all(replies == [g] * 3 for replies, g in zip(nucleus.sample(states, turns, 3), greedy))
    if mode == "choose":   # distinct samples: as many as the restricted set holds
        one = LMAgent(model, tok, PromptConfig(), mode=mode, temperature=1.0, distinct=True,
                      decoding=Decoding(top_k=1))
        assert [len(r) for r in one.sample(states, turns, 3)] == [1] * len(states)


def test_generated_replies_end_at_a_stop_string(model, tok, states_turns):
    states, turns = states_turns
    sampled = dict(mode="generate", temperature=1.0, seed=0)   # (greedy, the untrained model says nothing)
    full = agent(model, tok, **sampled).act(states, turns)
    stop = next(reply[len(reply) // 2:] for reply in full if len(reply) > 1)   # the second half of some reply
    cut = LMAgent(model, tok, PromptConfig(), **sampled, decoding=Decoding(max_new_tokens=8, stop=[stop]))
    shortened = cut.act(states, turns)
    assert shortened == [reply.split(stop, 1)[0] for reply in full] and shortened != full
