"""The env word-level tokenizer: no <unk> on anything ALFWorld says, exact decode, stable ids, reply-only masks."""
import re

import pytest
import torch
from transformers import AutoTokenizer

from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.alfworld.setup import TASK_TYPES, import_alfworld

torch.set_num_threads(1)

OBSERVATIONS = [  # verbatim from a generated kitchen game played by the expert
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 1, a fridge 1, a garbagecan 1, a microwave 1, "
    "a sinkbasin 1, a stoveburner 1, and a toaster 1.\n\nYour task is to: put a hot bread in fridge.",
    "You are in the middle of a room. Looking quickly around you, you see nothing.",
    "You arrive at microwave 1. The microwave 1 is closed.",
    "You open the microwave 1. The microwave 1 is open. In it, you see a egg 1.",
    "You close the microwave 1.",
    "You arrive at garbagecan 1. On the garbagecan 1, you see a bread 3, and a tomato 1.",
    "You pick up the bread 3 from the garbagecan 1.",
    "You heat the bread 3 using the microwave 1.",
    "You move the bread 3 to the fridge 1.",
    "You are facing the sinkbasin 2. Next to it, you see nothing.",
    "You clean the cloth 1 using the sinkbasin 2.",
    "You cool the mug 2 using the fridge 1.",
    "You turn on the desklamp 2.",
    "You are carrying: a pencil 1.",
    "You are not carrying anything.",
    "There's nothing special about pencil 1.",
    "This is a hot bread 3.",
    "Nothing happens.",
]
COMMAND_FORMS = ["go to {r}", "open {r}", "close {r}", "take {o} from {r}", "move {o} to {r}", "put {o} into {r}",
                 "put {o} in {r}", "heat {o} with {r}", "cool {o} with {r}", "clean {o} with {r}",
                 "slice {o} with {o}", "use {o}", "examine {o}", "examine {r}", "inventory", "look", "help"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def alfworld_names():
    import_alfworld()
    import alfworld.gen.constants as c

    objects = sorted({o.lower() for o in c.OBJECTS_WSLICED + c.MOVABLE_RECEPTACLES})
    receptacles = sorted({r.lower() for r in c.RECEPTACLES})
    return objects, receptacles


def assert_no_unk(tok, texts):
    ids = tok(list(texts))["input_ids"]
    bad = [t for t, i in zip(texts, ids) if tok.unk_token_id in i]
    assert not bad, bad[:5]


def test_vocab_is_deterministic_and_small(tok):
    assert build_tokenizer().get_vocab() == tok.get_vocab()
    assert 250 < len(tok) < 1000
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]


def test_every_goal_sentence_has_no_unk(tok, alfworld_names):
    from alfworld.gen.goal_library import gdict

    objects, receptacles = alfworld_names
    templates = [t for task_type in TASK_TYPES for variant in (task_type, f"{task_type}_slice")
                 for t in gdict[variant]["templates"]]
    sentences = [f"Your task is to: {t.format(obj=o, recep=r, toggle=o, mrecep=r)}."
                 for t in templates for o, r in zip(objects, receptacles * 4)]
    assert_no_unk(tok, sentences)


def test_every_name_number_and_command_form_has_no_unk(tok, alfworld_names):
    objects, receptacles = alfworld_names
    assert_no_unk(tok, [f"a {n} {i}," for n in objects + receptacles for i in range(100)])
    commands = [f.format(o=f"{o} {i % 99}", r=f"{r} {i % 99 + 1}") for f in COMMAND_FORMS
                for i, (o, r) in enumerate(zip(objects, receptacles * 4))]
    assert_no_unk(tok, commands + OBSERVATIONS)


def test_grammar_feedback_rendered_with_names_has_no_unk(tok):
    from alfworld.info import ALFRED_TWL2_PATH

    grammar = open(ALFRED_TWL2_PATH).read()
    rhs = [s.encode().decode("unicode_escape") for s in re.findall(r'"rhs":\s*"((?:[^"\\]|\\.)*)"', grammar)]
    filled = [re.sub(r"\[\{[^}]*\}\]", "a apple 1, and a mug 2", s) for s in rhs]
    filled = [re.sub(r"\{[^}]*\}", "cabinet 3", re.sub(r"#[^#]*#", "", s)) for s in filled]
    filled = [s.replace(")}", ")") for s in filled]  # a stray brace in the grammar's unused "overview(o, r)" rule
    assert_no_unk(tok, filled)


def test_decode_is_exact_for_env_text_and_replies(tok):
    texts = OBSERVATIONS + ["take bread 3 from garbagecan 1", "REASON: the bread 3 is hot.\nACTION: go to fridge 1",
                            "Room: cabinet 1 (closed), drawer 2 (nothing)\nNow: look -> Nothing happens."]
    for text in texts:
        ids = tok(text)["input_ids"]
        assert tok.decode(ids) == text
        assert tok(tok.decode(ids))["input_ids"] == ids


def test_newline_is_a_token(tok):
    assert tok.convert_ids_to_tokens(tok("look\nhelp")["input_ids"]) == ["look", "\n", "help"]


def test_save_load_round_trip_gives_identical_ids(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    chat = [{"role": "system", "content": "You are a household robot."},
            {"role": "user", "content": OBSERVATIONS[0]}, {"role": "assistant", "content": "go to fridge 1"}]
    assert loaded(OBSERVATIONS)["input_ids"] == tok(OBSERVATIONS)["input_ids"]
    assert loaded.get_vocab() == tok.get_vocab()
    kw = dict(return_dict=True, return_assistant_tokens_mask=True)
    assert dict(loaded.apply_chat_template(chat, **kw)) == dict(tok.apply_chat_template(chat, **kw))
    assert loaded.decode(tok(OBSERVATIONS[5])["input_ids"]) == OBSERVATIONS[5]
    assert (loaded.bos_token, loaded.eos_token, loaded.pad_token, loaded.unk_token) == ("<s>", "</s>", "<pad>", "<unk>")


def test_assistant_mask_covers_exactly_the_replies(tok):
    replies = ["go to microwave 1", "REASON: it is closed.\nACTION: open microwave 1"]
    chat = [{"role": "system", "content": "You are a household robot."},
            {"role": "user", "content": OBSERVATIONS[1]}, {"role": "assistant", "content": replies[0]},
            {"role": "user", "content": OBSERVATIONS[2]}, {"role": "assistant", "content": replies[1]}]
    out = tok.apply_chat_template(chat, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    masked = [i for i, m in zip(ids, mask) if m]
    expected = [t for r in replies for t in tok(r)["input_ids"] + [tok.eos_token_id]]
    assert masked == expected
    assert ids[0] == tok.bos_token_id
    # each masked span starts right after an <|assistant|> token
    starts = [k for k in range(len(mask)) if mask[k] and not mask[k - 1]]
    assert [ids[k - 1] for k in starts] == [tok.convert_tokens_to_ids("<|assistant|>")] * 2


def test_generation_prompt_ends_with_assistant_marker(tok):
    ids = tok.apply_chat_template([{"role": "user", "content": "look"}], add_generation_prompt=True)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["<s>", "<|user|>", "look", "<|assistant|>"]
