"""The reasoning setting: generated problems, the step checker, worked solutions with known first errors,
Monte-Carlo step labels, first-error F1 and calibration — pinned on hand-built cases."""
import json
import random

import pytest
from hypothesis import given, settings, strategies as st

from agentprm.errors import UserError
from agentprm.reason.check import checker, final_answer, numeric, step_verdicts, steps
from agentprm.reason.labels import mc_step_labels, prefix
from agentprm.reason.metrics import expected_calibration_error, first_error_f1, predicted_first_error, reliability
from agentprm.reason.problems import (Problem, chain_problem, chain_problems, read_problems, split_of,
                                      write_problems)
from agentprm.reason.solutions import ERRORS, solution_mix, write_solution

P = chain_problem(37, [("+", 58), ("-", 21), ("*", 3)])   # 37 → 95 → 74 → 222


def test_a_chain_problem_reads_as_its_instructions_and_its_answer():
    assert P.question == "Start with 37. Add 58. Subtract 21. Multiply by 3. What is the result?"
    assert P.answer == "222" and P.checkable_steps


def test_generated_problems_are_seeded_distinct_and_never_shared_between_splits():
    train = chain_problems("train", 60, seed=3, steps=(2, 3), digits=2)
    again = chain_problems("train", 60, seed=3, steps=(2, 3), digits=2)
    test = chain_problems("eval", 30, seed=3, steps=(2, 3), digits=2)
    assert train == again and len({p.id for p in train}) == 60
    assert {p.question for p in train}.isdisjoint(p.question for p in test)
    assert {split_of(p.question) for p in test} == {"eval"}
    assert all(2 <= len(p.ops) <= 3 and 10 <= p.start <= 99 for p in train)
    for p in train:   # values stay positive: a subtrahend is below the value it is taken from
        value = p.start
        for op, x in p.ops:
            value = value + x if op == "+" else value - x if op == "-" else value * x
            assert value > 0
        assert str(value) == p.answer
    assert chain_problems("train", 10, seed=4, ops="+") != chain_problems("train", 10, seed=3, ops="+")
    assert {op for p in chain_problems("train", 20, seed=0, ops="*") for op, _ in p.ops} == {"*"}


def test_every_line_of_a_solution_is_judged_against_the_problem_and_the_line_before():
    right = "37 + 58 = 95\n95 - 21 = 74\n74 * 3 = 222\nAnswer: 222"
    v = step_verdicts(P, right)
    assert v.right == (True,) * 4 and v.first_error is None and v.correct
    merged = step_verdicts(P, "37 + 58 - 21 = 74\n74 * 3 = 222\nAnswer: 222")
    assert merged.right == (True, True, True)
    # a slip: line 1 is wrong; line 2 continues correctly from what line 1 showed; the answer is then wrong
    slip = step_verdicts(P, "37 + 58 = 95\n95 - 21 = 75\n75 * 3 = 225\nAnswer: 225")
    assert slip.right == (True, False, True, True) and slip.first_error == 1 and not slip.correct
    # precedence classes may not be mixed in one line; a skipped instruction shows on the next line
    assert step_verdicts(P, "37 + 58 = 95\n95 - 21 * 3 = 222\nAnswer: 222").first_error == 1
    assert step_verdicts(P, "37 + 58 = 95\n95 * 3 = 285\nAnswer: 285").right == (True, False, False)
    # the answer must come after every instruction, equal the last shown value, and end the solution
    assert step_verdicts(P, "37 + 58 = 95\nAnswer: 95").right == (True, False)
    assert step_verdicts(P, right + "\n1 + 1 = 2").right == (True,) * 4 + (False,)
    assert step_verdicts(P, "37 + 58 = 95\n95 - 21 = 74\n74 * 3 = 222").first_error == 3   # never answered
    assert step_verdicts(P, "thirty seven\nAnswer: 222").right == (False, False)
    with pytest.raises(UserError, match="no chain"):
        step_verdicts(Problem("q", "2+2?", "4"), "Answer: 4")


def test_final_answer_checkers():
    gsm = Problem("g", "How many?", "1,234")
    assert final_answer("work\nAnswer: 7\nmore\nAnswer: 8") == "8" and final_answer("no answer") is None
    assert numeric(gsm, "so\nAnswer: 1234 apples") and not numeric(gsm, "Answer: 1233") and not numeric(gsm, "1234")
    assert checker("exact")(Problem("e", "q", "Paris"), "Answer:  paris ")
    imported = checker("agentprm.reason.check:numeric")
    assert imported(gsm, "Answer: 1234") is True and imported(gsm, "Answer: 1") is False
    with pytest.raises(UserError, match="unknown answer checker 'nope'; known: numeric, exact"):
        checker("nope")
    for name in ("agentprm.reason.check:missing", ":", ":x", "nosuchmodule:f"):
        with pytest.raises(UserError, match="cannot be imported"):
            checker(name)
    with pytest.raises(UserError, match=r"must take \(problem, solution\)"):
        checker("os:getcwd")
    with pytest.raises(UserError, match="returned None, not true/false"):   # print takes anything, answers None
        checker("builtins:print")(gsm, "")


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10_000), merge=st.sampled_from([0.0, 0.5, 1.0]),
       error=st.sampled_from([None, *ERRORS]))
def test_the_writer_and_the_checker_agree_on_where_the_first_error_is(seed, merge, error):
    problem = chain_problems("train", 1, seed=seed, steps=(1, 5), digits=2, ops="+-*")[0]
    text, first_error = write_solution(problem, random.Random(seed), merge, error)
    verdict = step_verdicts(problem, text)
    assert verdict.first_error == first_error
    assert (first_error is None) == (error is None)
    if error is None:
        assert verdict.correct and len(verdict.lines) <= len(problem.ops) + 1


def test_merging_changes_a_solutions_length_not_its_answer():
    long, _ = write_solution(P, random.Random(0), merge=0.0)
    short, _ = write_solution(P, random.Random(0), merge=1.0)
    assert long == "37 + 58 = 95\n95 - 21 = 74\n74 * 3 = 222\nAnswer: 222"
    assert short == "37 + 58 - 21 = 74\n74 * 3 = 222\nAnswer: 222"
    mix = solution_mix(chain_problems("train", 200, seed=0, ops="+-*"), seed=0, noisy=0.25)
    wrong = sum(step_verdicts(p, s).first_error is not None for p, s in mix)
    assert 30 <= wrong <= 70    # ~25% of 200 drawn with an error


def test_problem_files_round_trip_and_bad_lines_are_named(tmp_path):
    problems = chain_problems("eval", 5, seed=1) + [Problem("gsm-1", "Tom has 3 apples...", "7")]
    write_problems(tmp_path / "p.jsonl", problems)
    assert read_problems(tmp_path / "p.jsonl") == problems
    bad = tmp_path / "bad.jsonl"
    for row, message in ((["x"], "a line must be a JSON object"), ({"answer": 3}, "field 'question'"),
                         ({"question": "q", "answer": True}, "field 'answer'"),
                         ({"question": "q", "answer": "9", "chain": {"start": 2, "ops": [["+", 3]]}},
                          "field 'answer' '9' is not what the chain gives \\(5\\)"),
                         ({"question": "q", "answer": "5", "chain": {"start": 2, "ops": [["/", 3]]}}, "field 'chain'")):
        bad.write_text(json.dumps({"question": "ok", "answer": 1}) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(UserError, match=f"bad.jsonl:2: {message}"):
            read_problems(bad)
    bad.write_text('{"question": "q", "answer": 1, "id": "a"}\n{"question": "r", "answer": 2, "id": "a"}\n')
    with pytest.raises(UserError, match="bad.jsonl:2: field 'id' 'a' repeats"):
        read_problems(bad)


class ScriptedCompleter:
    """Completes every prefix with fixed continuations, so the labels can be worked out by hand."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def complete(self, problems, prefixes, n, seed):
        self.calls.append(list(prefixes))
        return [self.table[x][:n] for x in prefixes]


def test_monte_carlo_step_labels_are_the_share_of_completions_that_end_right():
    solution = "37 + 58 = 95\n95 - 21 = 75\n75 * 3 = 225\nAnswer: 225"
    table = {"37 + 58 = 95\n": ["95 - 21 = 74\n74 * 3 = 222\nAnswer: 222", "Answer: 95", "x\nAnswer: 222",
                                "Answer: 1"],
             "37 + 58 = 95\n95 - 21 = 75\n": ["75 * 3 = 225\nAnswer: 225"] * 4,
             "37 + 58 = 95\n95 - 21 = 75\n75 * 3 = 225\n": ["Answer: 222", "Answer: 225", "Answer: 225", "Answer: 9"]}
    completer = ScriptedCompleter(table)
    labels = mc_step_labels([P], [solution], completer, k=4, check=checker("numeric"))[0]
    assert labels.soft == (0.5, 0.0, 0.25, 0.0)   # the last step: the solution's own outcome
    assert labels.hard == (1, 0, 1, 0)
    assert len(completer.calls) == 1 and len(completer.calls[0]) == 3   # one call; no completion of the answer
    assert prefix(solution, 1) == "37 + 58 = 95\n95 - 21 = 75\n"


def test_first_error_f1_by_hand():
    assert predicted_first_error([0.9, 0.4, 0.1]) == 1 and predicted_first_error([0.9, 0.6]) is None
    scores = [[0.9, 0.2, 0.9], [0.9, 0.9, 0.9], [0.1, 0.9], [0.9, 0.9], [0.3, 0.9]]
    truth = [1, 2, 0, None, None]
    # errors: hit, miss (none predicted), hit → 2/3; correct: hit, miss (predicted at 0) → 1/2
    score = first_error_f1(scores, truth)
    assert (score.acc_error, score.acc_correct, score.n_error, score.n_correct) == (2 / 3, 0.5, 3, 2)
    assert score.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert first_error_f1(scores, truth, threshold=0.05).f1 == 0.0    # flags nothing: no error found
    assert first_error_f1([[0.9]], [None]).acc_error is None


def test_calibration_by_hand():
    probs, outcomes = [0.05, 0.15, 0.15, 0.95, 1.0], [0, 1, 0, 1, 1]
    table = reliability(probs, outcomes, bins=10)
    assert [b.count for b in table] == [1, 2, 0, 0, 0, 0, 0, 0, 0, 2]
    assert table[1].mean_p == pytest.approx(0.15) and table[1].mean_y == 0.5 and table[2].mean_p is None
    # ECE = 1/5·|0 − 0.05| + 2/5·|0.5 − 0.15| + 2/5·|1 − 0.975|
    assert expected_calibration_error(probs, outcomes) == pytest.approx(0.01 + 0.14 + 0.01)
    assert expected_calibration_error([0.0, 1.0], [0, 1]) == 0.0
    with pytest.raises(ValueError, match="lie in"):
        reliability([1.5], [1])


# ------------------------------------------------------------------------------------------ token-level process RL
import torch  # noqa: E402

from agentprm.agent.scoring import reply_logprobs  # noqa: E402
from agentprm.models import build_model  # noqa: E402
from agentprm.reason.model import reasoning_tokenizer  # noqa: E402
from agentprm.reason.rl import (ReasonRLConfig, clipped_objective, grpo_token_advantages,  # noqa: E402
                                prime_token_returns, spro_token_advantages, token_logprobs, train_rl, whiten)


def test_spro_on_tokens_by_hand_and_beta_zero_is_grpo():
    outcomes = torch.tensor([1.0, 0.0])
    log_ratios, mask = torch.tensor([[0.1, 0.2], [0.3, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # R = [[0.1, 0.3], [0.3, ·]]; token 0: mean 0.2 → MSA ∓0.1; token 1: response 0 alone → MSA 0; outcome ±1
    a = spro_token_advantages(outcomes, log_ratios, mask, beta=1.0)
    assert torch.allclose(a, torch.tensor([[0.9, 1.0], [-0.9, 0.0]]), atol=1e-5)
    assert torch.equal(spro_token_advantages(outcomes, log_ratios, mask, beta=0.0), grpo_token_advantages(outcomes, mask))


def test_prime_rloo_returns_by_hand():
    outcomes = torch.tensor([1.0, 0.0])
    rewards = torch.tensor([[0.2, 0.4, 0.0], [0.1, 0.1, 0.1]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # process: r·2 − (0.3 + 0.1) → [[0, 0.4], [−0.2, −0.2, −0.2]]; outcome LOO ±1 at each last token; reverse sums
    returns = prime_token_returns(outcomes, rewards, mask, outcome_coef=1.0, process_coef=1.0)
    assert torch.allclose(returns, torch.tensor([[1.4, 1.4, 0.0], [-1.6, -1.4, -1.2]]), atol=1e-6)
    w = whiten(returns, mask)
    assert abs(float(w[mask.bool()].mean())) < 1e-6 and float(w[~mask.bool()].abs().sum()) == 0.0


def test_the_clipped_objective_by_hand():
    logp, old, mask = torch.tensor([[torch.log(torch.tensor(1.5))]]), torch.zeros(1, 1), torch.ones(1, 1)
    assert float(clipped_objective(logp, old, torch.ones(1, 1), mask, 0.2)) == pytest.approx(-1.2)   # clipped
    assert float(clipped_objective(logp, old, -torch.ones(1, 1), mask, 0.2)) == pytest.approx(1.5)   # pessimistic


def _tiny():
    tokenizer = reasoning_tokenizer([P.question])
    return build_model("tiny", tokenizer, seed=0), tokenizer


def test_token_logprobs_add_up_to_the_reply_scores_and_entropy_is_the_distributions():
    model, tok = _tiny()
    prompts, replies = [[1, 5, 9, 12], [1, 7]], [[20, 21, 22], [23]]
    with torch.no_grad():
        lp, mask, ent = token_logprobs(model, prompts, replies, tok.pad_token_id, entropy=True)
        sums = reply_logprobs(model, prompts, replies, tok.pad_token_id)
        probs = model(input_ids=torch.tensor([prompts[1] + replies[1]])).logits[0, len(prompts[1]) - 1].softmax(-1)
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert torch.allclose(lp.sum(1), sums, atol=1e-5)
    assert float(ent[1, 0]) == pytest.approx(float(-(probs * probs.log()).sum()), abs=1e-5) and float(ent[1, 1]) == 0


@pytest.mark.parametrize("algo", ["grpo", "spro", "prime"])
def test_a_few_rl_steps_learn_what_the_checker_rewards(algo):
    """The checker rewards responses that start with the digit 7: each method raises the share of them."""
    model, tok = _tiny()
    problems = chain_problems("train", 8, seed=0)
    starts_with_7 = lambda p, text: text.startswith("7")   # noqa: E731
    cfg = ReasonRLConfig(algo=algo, steps=12, prompts=4, group=8, max_new_tokens=4, lr=3e-3, prime_lr=3e-3,
                         beta=0.5)
    rows = train_rl(model, tok, problems, cfg, starts_with_7)
    early, late = (sum(r["batch_accuracy"] for r in rows[k]) / 3 for k in (slice(0, 3), slice(-3, None)))
    assert late > early + 0.15, [r["batch_accuracy"] for r in rows]
    assert all(r["groups"] <= 4 and r["mean_length"] <= 4 for r in rows)
    assert ("prm_loss" in rows[-1]) == (algo == "prime")


class Crash(Exception):
    pass


@pytest.mark.parametrize("algo", ["spro", "prime"])
def test_a_killed_rl_run_resumes_to_the_weights_an_uninterrupted_run_ends_with(algo, tmp_path):
    """A crash after step 3 of 5; the same run started again in the same checkpoint block trains steps 4 and 5 only
    and ends bit for bit where the uninterrupted run ends — the policy, PRIME's implicit PRM and the problem order."""
    from agentprm.train.checkpoint import resumable

    problems = chain_problems("train", 8, seed=0)
    cfg = ReasonRLConfig(algo=algo, steps=5, prompts=3, group=4, max_new_tokens=4, lr=3e-3, prime_lr=3e-3)
    starts_with_7 = lambda p, text: text.startswith("7")   # noqa: E731

    def run(root, crash_after=0):
        model, tok = _tiny()
        seen = []

        def log(row):
            seen.append(row["step"])
            if row["step"] == crash_after:
                raise Crash

        with resumable(root, 1e-9):   # a checkpoint after every step
            rows = train_rl(model, tok, problems, cfg, starts_with_7, seed=1, on_log=log)
        return model, rows, seen

    whole, rows, _ = run(tmp_path / "a")
    with pytest.raises(Crash):
        run(tmp_path / "b", crash_after=4)
    resumed, rows_b, seen = run(tmp_path / "b")
    assert seen == [4, 5]                          # step 4 crashed before its checkpoint: trained again, 5 new
    drop = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]   # noqa: E731
    assert drop(rows_b) == drop(rows) and [r["step"] for r in rows_b] == [1, 2, 3, 4, 5]
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), resumed.parameters()))
    again, rows_c, seen = run(tmp_path / "b")      # a finished run started again trains nothing
    assert seen == [] and drop(rows_c) == drop(rows)
    assert all(torch.equal(p, q) for p, q in zip(whole.parameters(), again.parameters()))


# ------------------------------------------------------------------------------------------------- the step PRM
from agentprm.reason.config import StepPRMConfig  # noqa: E402
from agentprm.reason.model import ReasonerConfig, train_reasoner  # noqa: E402
from agentprm.reason.step_prm import StepExample, StepPRM, aggregate, train_step_prm  # noqa: E402


@pytest.fixture(scope="module")
def reasoner_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reasoner") / "m"
    pairs = solution_mix(chain_problems("train", 40, seed=0), seed=0)
    train_reasoner(pairs, folder, ReasonerConfig(steps=5, batch_size=8), seed=0, progress=False)
    return folder


def test_one_forward_scores_every_step_as_its_own_prefix_would_be_scored(reasoner_dir):
    prm = StepPRM.from_reasoner(reasoner_dir, seed=0).eval()
    lines = ["37 + 58 = 95", "95 - 21 = 74", "74 * 3 = 222", "Answer: 222"]
    other = chain_problem(12, [("+", 30)])
    with torch.no_grad():
        together = prm.step_logits([P, other], [lines, ["12 + 30 = 42"]])
        for k in range(len(lines)):
            ids, _ = prm.encode(P, lines[:k + 1])
            alone = prm.lm(input_ids=torch.tensor([ids])).logits[0, 0]
            assert float(together[0][k]) == pytest.approx(float(alone), abs=1e-4)
    assert len(together[1]) == 1
    again = StepPRM.from_reasoner(reasoner_dir, seed=0).eval()
    with torch.no_grad():
        assert torch.equal(again.step_logits([P], [lines])[0], together[0])     # the seed fixes the new head


def test_step_aggregations_by_hand():
    assert aggregate([0.9, 0.2, 0.8], "min") == 0.2 and aggregate([0.9, 0.2, 0.8], "last") == 0.8
    assert aggregate([0.5, 0.5], "product") == 0.25
    with pytest.raises(UserError, match="aggregation must be one of"):
        aggregate([0.5], "mean")


@pytest.mark.parametrize("loss", ["bce", "pqm", "orm"])
def test_each_step_objective_learns_its_labels(reasoner_dir, loss):
    """Two solutions of one problem, one with a slip at step 1: each objective learns to score what it is given."""
    right = ("37 + 58 = 95", "95 - 21 = 74", "74 * 3 = 222", "Answer: 222")
    slipped = ("37 + 58 = 95", "95 - 21 = 75", "75 * 3 = 225", "Answer: 225")
    examples = [StepExample(P, right, (1.0, 1.0, 1.0, 1.0), (1, 1, 1, 1), 1.0),
                StepExample(P, slipped, (1.0, 0.0, 0.0, 0.0), (1, 0, 0, 0), 0.0)]
    prm = StepPRM.from_reasoner(reasoner_dir, seed=0)
    train_step_prm(prm, examples, StepPRMConfig(loss=loss, steps=60, batch_size=2, lr=3e-3), seed=0)
    good, bad = prm.step_scores([P, P], ["\n".join(right), "\n".join(slipped)])
    assert good[-1] > bad[-1] + 0.2                         # every objective ranks the outcomes
    if loss != "orm":                                       # the step objectives also find the slip
        assert bad[1] < bad[0] and bad[1] < good[1]
    if loss == "bce":
        assert bad[1] < 0.3 < 0.7 < min(good)


# ------------------------------------------------------------------------------------------- the CLI, end to end
from agentprm.cli import main  # noqa: E402
from agentprm.reason.model import HFCompleter, load_reasoner, sample  # noqa: E402


def test_the_reason_commands_end_to_end(tmp_path, capsys):
    """problems → sft → eval → rl for each method, with their JSON summaries; bad input refused in one line."""
    train, test = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    assert main(["reason", "problems", "--split", "train", "--num", "60", "--out", str(train), "--seed", "3"]) == 0
    assert main(["reason", "problems", "--split", "eval", "--num", "10", "--out", str(test), "--max-steps", "2"]) == 0
    assert [p.question for p in read_problems(train)] == [p.question for p in chain_problems("train", 60, seed=3)]
    assert main(["reason", "problems", "--split", "eval", "--num", "10", "--out", str(test)]) == 2   # not ours
    model = tmp_path / "reasoner"
    assert main(["reason", "sft", "--problems", str(train), "--out", str(model), "--steps", "8", "--batch-size", "8",
                 "--json", str(tmp_path / "sft.json")]) == 0
    assert json.loads((tmp_path / "sft.json").read_text())["steps"] == 8
    assert main(["reason", "eval", "--model", str(model), "--problems", str(test), "--samples", "3", "--temperature",
                 "1", "--out", str(tmp_path / "solutions.jsonl"), "--json", str(tmp_path / "eval.json")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "solutions.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / "eval.json").read_text())
    assert len(rows) == 30 and summary["accuracy"] == sum(r["correct"] for r in rows) / 30
    assert all("first_error" in r for r in rows)
    for algo in ("grpo", "spro", "prime"):
        out = tmp_path / algo
        assert main(["reason", "rl", "--model", str(model), "--problems", str(train), "--eval-problems", str(test),
                     "--algo", algo, "--steps", "2", "--prompts", "2", "--group", "3", "--max-new-tokens", "6",
                     "--out", str(out), "--json", str(tmp_path / f"{algo}.json")]) == 0
        log = json.loads((tmp_path / f"{algo}.json").read_text())["log"]
        assert [r["step"] for r in log] == [1, 2] and "eval_accuracy" in log[-1]
        assert json.loads((out / "agentprm.json").read_text())["reason_rl"]["config"]["algo"] == algo
    capsys.readouterr()
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text('{"question": "How many?", "answer": 4}\n')
    assert main(["reason", "sft", "--problems", str(gsm), "--out", str(tmp_path / "x")]) == 2
    assert "has no chain" in capsys.readouterr().err
    assert main(["reason", "eval", "--model", str(model), "--problems", str(gsm), "--checker", "nope"]) == 2
    assert "unknown answer checker 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_step_labels_from_a_real_policy_and_a_step_prm_judged_by_first_error_f1(reasoner_dir):
    """The step-PRM pipeline in miniature: π's own solutions, MC labels from its completions, a PRM, its F1."""
    model, tok = load_reasoner(reasoner_dir)
    problems = chain_problems("train", 6, seed=5)
    solutions = [s[0] for s in sample(model, tok, problems, 1, 1.0, seed=0, max_new_tokens=24)]
    labels = mc_step_labels(problems, solutions, HFCompleter(model, tok, 1.0, max_new_tokens=24), 2,
                            checker("numeric"), seed=1)
    for s, lab in zip(solutions, labels):
        assert len(lab.soft) == len(steps(s)) and all(v in (0.0, 0.5, 1.0) for v in lab.soft)
    examples = [StepExample(p, tuple(steps(s)), lab.soft, lab.hard, lab.soft[-1])
                for p, s, lab in zip(problems, solutions, labels) if steps(s)]
    prm = StepPRM.from_reasoner(reasoner_dir, seed=0)
    train_step_prm(prm, examples, StepPRMConfig(steps=3, batch_size=4), seed=0)
    scores = prm.step_scores(problems, solutions)
    truth = [step_verdicts(p, s).first_error for p, s in zip(problems, solutions)]
    score = first_error_f1(scores, truth)
    assert score.n_error + score.n_correct == 6 and 0.0 <= score.f1 <= 1.0


# -------------------------------------------------------------------------------------- step-level beam search
from agentprm.agent.lm import HFBackend  # noqa: E402
from agentprm.reason.model import prompt_ids  # noqa: E402
from agentprm.reason.search import StepSampler, prm_scorer, random_scorer, step_beam  # noqa: E402

RIGHT = ("37 + 58 = 95", "95 - 21 = 74", "74 * 3 = 222", "Answer: 222")
SLIPS = ("37 + 58 = 96", "95 - 21 = 75", "74 * 3 = 221", "Answer: 221")


class ScriptedSampler:
    """Offers, after a prefix of k lines, the slipped k-th line first and the right one second (more than two
    draws repeat them); the answer line ends the turn. Records what it was asked."""

    def __init__(self):
        self.asked: list[tuple] = []

    def next_lines(self, problems, prefixes, n, seed):
        self.asked.append(tuple(prefixes))
        return [[(pair[j % 2], len(x) == 3, 5) for j in range(n)]
                for x in prefixes for pair in [(SLIPS[len(x)], RIGHT[len(x)])]]


def oracle(problems, prefixes):
    """1 for a prefix with no wrong line, else 0 — the checker as a step scorer."""
    return [float(step_verdicts(p, "\n".join(x)).first_error in (None, len(x))) for p, x in zip(problems, prefixes)]


def test_beam_search_keeps_the_best_prefixes_and_answers_with_the_best_finished_solution():
    sampler = ScriptedSampler()
    [found] = step_beam(sampler, oracle, [P], width=1, expand=2, seed=0)
    assert found.solution == "\n".join(RIGHT) and found.score == 1.0
    assert found.tokens == 4 * 2 * 5                             # 4 depths × 1 beam × 2 lines × 5 tokens
    assert sampler.asked == [((),), (RIGHT[:1],), (RIGHT[:2],), (RIGHT[:3],)]   # only the kept prefix grows
    # two beams: the right prefix and, ranked below it, a slipped one; duplicates of a draw count once
    sampler = ScriptedSampler()
    step_beam(sampler, oracle, [P], width=2, expand=4, seed=0)
    assert sampler.asked[1] == (RIGHT[:1], SLIPS[:1])
    # the same search with no judgement keeps whatever the hash prefers, and answers with a finished solution
    [blind] = step_beam(ScriptedSampler(), random_scorer(0), [P], width=1, expand=2, seed=0)
    assert len(steps(blind.solution)) == 4 and blind.solution.splitlines()[-1].startswith("Answer:")
    assert random_scorer(0)([P], [RIGHT]) == random_scorer(0)([P], [RIGHT]) != random_scorer(1)([P], [RIGHT])
    with pytest.raises(UserError, match="width, expand and max_lines must be >= 1"):
        step_beam(ScriptedSampler(), oracle, [P], width=0, expand=2, seed=0)


def test_a_line_budget_ends_every_beam():
    [found] = step_beam(ScriptedSampler(), oracle, [P], width=2, expand=2, seed=0, max_lines=2)
    assert found.solution == "\n".join(RIGHT[:2])            # unfinished at the budget: the best prefix is the answer


def test_stop_tokens_end_a_completion_where_the_same_draws_would_have_gone_on(reasoner_dir):
    model, tok = load_reasoner(reasoner_dir)
    newline = tok("\n", add_special_tokens=False)["input_ids"][-1]
    end = StepSampler(model, tok).end
    prompts = [prompt_ids(tok, p) for p in chain_problems("eval", 3, seed=1)]
    whole = HFBackend(model, tok.pad_token_id, end).generate(prompts, 2, 1.0, 24, seed=3)
    lines = HFBackend(model, tok.pad_token_id, end, stop_ids=[newline]).generate(prompts, 2, 1.0, 24, seed=3)
    for w, x in zip((s for group in whole for s in group), (s for group in lines for s in group)):
        cut = next((k for k, t in enumerate(w) if t in (newline, end)), len(w) - 1)
        assert x == w[:cut + 1]                                  # the same tokens, up to and including the stop


def test_a_step_prm_saved_and_loaded_scores_the_same_and_guides_a_real_search(reasoner_dir, tmp_path):
    prm = StepPRM.from_reasoner(reasoner_dir, seed=4)
    prm.save(tmp_path / "prm")
    again = StepPRM.load(tmp_path / "prm")                      # the saved head, not a new one
    assert again.step_scores([P], ["\n".join(RIGHT)]) == prm.step_scores([P], ["\n".join(RIGHT)])
    model, tok = load_reasoner(reasoner_dir)
    problems = chain_problems("eval", 3, seed=2)
    found = step_beam(StepSampler(model, tok, max_line_tokens=12), prm_scorer(again, "min"), problems, 2, 2, seed=0,
                      max_lines=3)
    assert len(found) == 3 and all(r.tokens > 0 and len(steps(r.solution)) <= 3 for r in found)
    assert all(r.score == pytest.approx(min(again.step_scores([p], [r.solution])[0]))
               for p, r in zip(problems, found) if r.solution)


def test_step_labels_a_step_prm_and_the_searches_it_guides_from_the_cli(reasoner_dir, tmp_path, capsys):
    """label → prm → eval with Best-of-N and with beam search, on a user's GSM8K-style problems (a final-answer
    checker is all MC labels need); the labels file round-trips and bad input is refused in one line."""
    problems = tmp_path / "mine.jsonl"
    write_problems(problems, chain_problems("train", 6, seed=8))
    labels, prm, summary = tmp_path / "labels.parquet", tmp_path / "prm", tmp_path / "s.json"
    assert main(["reason", "label", "--model", str(reasoner_dir), "--problems", str(problems), "--out", str(labels),
                 "--samples", "2", "--k", "2", "--max-new-tokens", "24", "--json", str(summary)]) == 0
    from agentprm.reason.labels import read_step_labels

    examples = read_step_labels(labels, read_problems(problems))
    assert json.loads(summary.read_text())["solutions"] == len(examples) > 0
    assert all(len(e.soft) == len(e.lines) and e.hard == tuple(int(v > 0) for v in e.soft) for e in examples)
    assert main(["reason", "prm", "--model", str(reasoner_dir), "--problems", str(problems), "--data", str(labels),
                 "--out", str(prm), "--steps", "3", "--batch-size", "4", "--loss", "pqm"]) == 0
    assert json.loads((prm / "agentprm.json").read_text())["config"]["loss"] == "pqm"
    test = tmp_path / "eval.jsonl"
    write_problems(test, chain_problems("eval", 4, seed=8))
    for extra in (["--samples", "3", "--temperature", "1"], ["--beam", "2", "2", "--temperature", "1"]):
        assert main(["reason", "eval", "--model", str(reasoner_dir), "--problems", str(test), "--prm", str(prm),
                     "--max-new-tokens", "24", "--json", str(summary), *extra]) == 0
        result = json.loads(summary.read_text())
        assert result["problems"] == 4
        assert ("beam" in result) == ("--beam" in extra) and ("prm_best_of_n_accuracy" in result) != ("--beam" in extra)
    capsys.readouterr()
    assert main(["reason", "eval", "--model", str(reasoner_dir), "--problems", str(test), "--beam", "2", "2"]) == 2
    assert "--beam needs --prm" in capsys.readouterr().err
    assert main(["reason", "eval", "--model", str(reasoner_dir), "--problems", str(test), "--prm", str(reasoner_dir)]) == 2
    assert "not a step PRM folder" in capsys.readouterr().err
    other = tmp_path / "other.jsonl"
    write_problems(other, chain_problems("train", 3, seed=99))
    assert main(["reason", "prm", "--model", str(reasoner_dir), "--problems", str(other), "--data", str(labels),
                 "--out", str(tmp_path / "x")]) == 2
    assert "row 0: field 'id'" in capsys.readouterr().err and not (tmp_path / "x").exists()
