"""AgentState tracking over scripted ALFWorld transcripts, its history key, and the shared prompt/reply format."""
import json
import random

import pytest
import torch

from agentprm.agent import AgentState, Goal, format_reply, parse_goal, parse_reply, state_to_messages
from agentprm.agent.tokenizer import build_tokenizer
from agentprm.envs.base import Turn

torch.set_num_threads(1)

TASK = "put a hot bread in fridge."
INTRO = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you "
         "see a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, a garbagecan 1, a microwave 1, and a "
         f"toaster 1.\n\nYour task is to: {TASK}")
SCRIPT = [  # (action, observation) in the engine's words
    ("look", "You are in the middle of a room. Looking quickly around you, you see nothing."),
    ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
    ("open microwave 1", "You open the microwave 1. The microwave 1 is open. In it, you see a egg 1."),
    ("close microwave 1", "You close the microwave 1."),
    ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
    ("go to garbagecan 1", "You arrive at garbagecan 1. On the garbagecan 1, you see a bread 3, and a tomato 1."),
    ("take bread 3 from garbagecan 1", "You pick up the bread 3 from the garbagecan 1."),
    ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed."),
    ("heat bread 3 with microwave 1", "You heat the bread 3 using the microwave 1."),
    ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
    ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a bread 1, and a mug 2."),
    ("move bread 3 to fridge 1", "You move the bread 3 to the fridge 1."),
]


def play(script, intro=INTRO, task=TASK, task_id="g1"):
    states = [AgentState.start(Turn(task=task, observation=intro, admissible=("look",)), task_id=task_id)]
    for action, obs in script:
        states.append(states[-1].advance(action, Turn(task=task, observation=obs, admissible=("look", "help"))))
    return states


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_state_tracks_room_memory_location_and_held_object():
    states = play(SCRIPT)
    start, end = states[0], states[-1]
    assert start.room == ("cabinet 2", "cabinet 1", "countertop 1", "fridge 1", "garbagecan 1", "microwave 1",
                          "toaster 1")
    assert start.goal == Goal(obj="bread", recep="fridge", toggle="")
    assert states[1].location is None and states[1].room == start.room  # "look" does not erase the listing
    assert states[2].contents("microwave 1") is None  # seen closed
    assert states[4].contents("microwave 1") == ("egg 1",)  # still known after closing it
    assert states[6].sightings() == (("bread 3", "garbagecan 1"),)
    took = states[7]
    assert (took.holding, took.location, took.contents("garbagecan 1")) == ("bread 3", "garbagecan 1", ("tomato 1",))
    assert states[9].held_state == ("hot",)
    assert (end.holding, end.held_state) == (None, ())
    assert end.contents("fridge 1") == ("bread 1", "mug 2", "bread 3")
    assert [r for r, _ in end.memory] == ["microwave 1", "cabinet 1", "garbagecan 1", "fridge 1"]
    assert end.steps == len(SCRIPT) and end.recent[-1] == SCRIPT[-1]
    assert start.memory == () and start.holding is None  # advancing never changes an earlier state


def test_inventory_and_nothing_happens():
    s = play([("inventory", "You are carrying: a pencil 1."), ("go to cabinet 9", "Nothing happens.")])
    assert s[1].holding == "pencil 1" and s[2].holding == "pencil 1" and s[2].location is None
    assert play([("inventory", "You are not carrying anything.")])[-1].holding is None


def test_key_is_equal_exactly_for_equal_histories():
    a, b = play(SCRIPT), play(SCRIPT)
    assert [s.key() for s in a] == [s.key() for s in b]
    assert len({s.key() for s in a}) == len(a)
    other_action = play([*SCRIPT[:3], ("examine microwave 1", SCRIPT[3][1])])
    other_obs = play([*SCRIPT[:3], (SCRIPT[3][0], "Nothing happens.")])
    assert other_action[3].key() == a[3].key()
    assert other_action[4].key() != a[4].key() != other_obs[4].key()
    assert play(SCRIPT, task_id="g2")[0].key() != a[0].key()
    hash(a[-1])  # states are immutable values


@pytest.mark.parametrize("task, goal", [
    ("put some peppershaker on cabinet.", Goal("peppershaker", "cabinet", "")),
    ("clean some cloth and put it in countertop.", Goal("cloth", "countertop", "")),
    ("cool some mug and put it in coffeemachine.", Goal("mug", "coffeemachine", "")),
    ("find two pen and put them in drawer.", Goal("pen", "drawer", "")),
    ("examine the pencil with the desklamp.", Goal("pencil", "", "desklamp")),
    ("Put the rinsed cloth on the counter.", None),
])
def test_parse_goal(task, goal):
    assert parse_goal(task) == goal


def test_found_marks_sightings_at_the_agents_location():
    def found(state):
        return state_to_messages(state)[1]["content"].split("\n")[2]

    states = play(SCRIPT)
    assert found(states[5]) == "Found: nothing"                           # at cabinet 1, bread not seen yet
    assert found(states[6]) == "Found: bread 3 at garbagecan 1 (here)"    # arrived where the bread is
    assert found(states[7]) == "Found: nothing"                           # held: not a sighting any more
    moved_on = states[6].advance("go to fridge 1", Turn(task=TASK, observation="You arrive at fridge 1. "
                                                        "The fridge 1 is closed.", admissible=("look",)))
    assert found(moved_on) == "Found: bread 3 at garbagecan 1"


def test_messages_put_task_held_object_and_sightings_first(tok):
    state = play(SCRIPT[:9])[-1]
    system, user = state_to_messages(state, show_admissible=True, history_turns=1)
    assert (system["role"], user["role"]) == ("system", "user")
    lines = user["content"].split("\n")
    assert lines[:3] == [f"Task: {TASK}", "Holding: bread 3 (hot)", "Found: nothing"]
    # search order: the first observation's listing read backwards, the visited ones with what was seen there
    assert lines[3] == ("Room: toaster 1, microwave 1 (egg 1), garbagecan 1 (tomato 1), fridge 1, countertop 1, "
                        "cabinet 1 (closed), cabinet 2")
    assert lines[4:] == ["Location: microwave 1",
                         "Before: go to microwave 1 -> You arrive at microwave 1. The microwave 1 is closed.",
                         "Now: heat bread 3 with microwave 1 -> You heat the bread 3 using the microwave 1.",
                         "Actions: look | help"]
    first = state_to_messages(play([])[0])[1]["content"]
    assert first.endswith("Now: You are in the middle of a room.") and "Welcome" not in first
    for s in play(SCRIPT):
        ids = tok.apply_chat_template(state_to_messages(s, show_admissible=True), add_generation_prompt=True,
                                      return_dict=True)["input_ids"]
        assert tok.unk_token_id not in ids


@pytest.mark.parametrize("text, expected", [
    ("go to fridge 1", (None, "go to fridge 1")),
    ("  go to fridge 1.\nmore text", (None, "go to fridge 1")),
    ("REASON: the bread is hot.\nACTION: go to fridge 1", ("the bread is hot.", "go to fridge 1")),
    ("Reason: my next action: look. Action:  open   fridge 1", ("my next action: look.", "open fridge 1")),
    ("ACTION: look", (None, "look")),
    ("", (None, "")),
])
def test_parse_reply(text, expected):
    assert parse_reply(text) == expected


def test_format_parse_round_trip(tok):
    for reason, action in [(None, "take bread 3 from garbagecan 1"), ("the bread 3 is in the garbagecan 1.", "look")]:
        reply = format_reply(action, reason)
        assert parse_reply(reply) == (reason, action)
        ids = tok(reply)["input_ids"]
        assert tok.unk_token_id not in ids and tok.decode(ids) == reply


def kitchen_episode(steps=50, seed=0):
    """A 29-receptacle kitchen holding 50 objects, searched receptacle by receptacle (opening what is closed)."""
    rng = random.Random(seed)
    counts = dict(cabinet=8, drawer=8, countertop=3, stoveburner=2, shelf=2, coffeemachine=1, fridge=1,
                  garbagecan=1, microwave=1, sinkbasin=1, toaster=1)
    receptacles = [f"{t} {i}" for t, n in counts.items() for i in range(n, 0, -1)]
    kinds = ["apple", "bread", "butterknife", "cup", "dishsponge", "egg", "fork", "knife", "lettuce", "mug",
             "peppershaker", "plate", "potato", "saltshaker", "spatula", "spoon", "tomato"]
    contents = {r: [] for r in receptacles}
    for i in range(50):
        contents[rng.choice(receptacles)].append(f"{kinds[i % len(kinds)]} {i // len(kinds) + 1}")
    listing = ", ".join(f"a {r}" for r in receptacles[:-1]) + f", and a {receptacles[-1]}"
    intro = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
             f"you see {listing}.\n\nYour task is to: put a clean lettuce in diningtable.")
    see = lambda r: ", ".join(f"a {o}" for o in contents[r]) or "nothing"  # noqa: E731
    script = []
    for r in receptacles * 2:
        if r.split()[0] in ("cabinet", "drawer", "fridge", "microwave"):
            script += [(f"go to {r}", f"You arrive at {r}. The {r} is closed."),
                       (f"open {r}", f"You open the {r}. The {r} is open. In it, you see {see(r)}.")]
        else:
            script.append((f"go to {r}", f"You arrive at {r}. On the {r}, you see {see(r)}."))
    admissible = tuple(f"go to {r}" for r in receptacles) + ("help", "inventory", "look")
    return intro, script[:steps], admissible


def test_prompt_stays_compact_over_a_50_turn_kitchen_episode(tok):
    intro, script, admissible = kitchen_episode()
    task = "put a clean lettuce in diningtable."
    state = AgentState.start(Turn(task=task, observation=intro, admissible=admissible))
    lengths = {False: [], True: []}
    for action, obs in script:
        state = state.advance(action, Turn(task=task, observation=obs, admissible=admissible))
        for show in lengths:
            ids = tok.apply_chat_template(state_to_messages(state, show_admissible=show), add_generation_prompt=True,
                                          return_dict=True)["input_ids"]
            assert tok.unk_token_id not in ids
            lengths[show].append(len(ids))
    assert len(state.memory) == 29 and state.steps == 50
    assert "lettuce" in state_to_messages(state)[1]["content"].split("\n")[2]  # Found: lettuce ... at ...
    assert max(lengths[False]) < 512 and max(lengths[True]) < 768


def test_real_games_walkthroughs(generated_tasks, tok):
    """On the real engine: no <unk> anywhere, and the memory agrees with every go/take/move of each game's
    stored walkthrough."""
    from agentprm.envs.alfworld.engine import AlfWorldEnv, game_file_of
    from agentprm.envs.alfworld.tasks import load_tasks

    for task in load_tasks(generated_tasks.train):
        env = AlfWorldEnv(task.game)
        turn = env.reset()
        state = AgentState.start(turn, task_id=task.task_id)
        assert state.room and state.goal is not None
        for action in json.loads(game_file_of(task.game).read_text())["walkthrough"]:
            turn = env.step(action)
            state = state.advance(action, turn)
            verb = action.split()[0]
            obj, _, place = action.removeprefix(f"{verb} ").partition(" from " if verb == "take" else " to ")
            if verb == "go":
                assert state.location == action.removeprefix("go to ")
            elif verb == "take":
                assert state.holding == obj and obj not in (state.contents(place) or ())
            elif verb == "move":
                assert state.holding is None and obj in state.contents(place)
            elif verb in ("heat", "cool", "clean"):
                assert state.held_state[-1] == {"heat": "hot", "cool": "cool", "clean": "clean"}[verb]
            ids = tok.apply_chat_template(state_to_messages(state, show_admissible=True), add_generation_prompt=True,
                                          return_dict=True)["input_ids"]
            assert tok.unk_token_id not in ids
        env.close()
        assert turn.won, task.task_id


def test_plain_format_shows_the_task_and_turns_only_and_is_saved_with_the_model(tmp_path):
    from agentprm.agent.encoding import PromptConfig
    from agentprm.errors import UserError

    sw = "This room is called the kitchen. In it, you see:\n\tthe agent\n\ta fridge"
    state = AgentState.start(Turn(task="Your task is to boil water.", observation=sw, admissible=("look around",)),
                             task_id="sw-boil-3")
    state = state.advance("open fridge", Turn(task="Your task is to boil water.", observation="The fridge is now open.",
                                              admissible=("look around", "close fridge")))
    system, user = state_to_messages(state, show_admissible=True, fmt="plain", system_prompt="You are a scientist.")
    assert system["content"] == "You are a scientist."
    assert user["content"].split("\n") == ["Task: Your task is to boil water.",
                                           "Start: This room is called the kitchen. In it, you see:",
                                           "\tthe agent", "\ta fridge",
                                           "Now: open fridge -> The fridge is now open.",
                                           "Actions: look around | close fridge"]
    alfworld = state_to_messages(play(SCRIPT)[3], fmt="plain")[1]["content"]
    assert alfworld.startswith(f"Task: {TASK}\nStart: {INTRO}\nBefore: ") and "Room:" not in alfworld
    first = state_to_messages(play([])[0], fmt="plain")[1]["content"]
    assert first == f"Task: {TASK}\nNow: {INTRO}"                      # before the first step: no "Start:" line
    turns = state_to_messages(state, fmt="turns", history_turns=0)[1]["content"]   # the observation is the state
    assert turns.split("\n") == ["Task: Your task is to boil water.", "Now: open fridge -> The fridge is now open."]
    assert state_to_messages(play(SCRIPT)[3]) == state_to_messages(play(SCRIPT)[3], fmt="alfworld")  # the default
    cfg = PromptConfig(format="plain", system_prompt="You are a scientist.", history_turns=1)
    cfg.save(tmp_path)
    assert PromptConfig.load(tmp_path) == cfg
    with pytest.raises(UserError, match="prompt format 'xml'"):
        PromptConfig(format="xml")
    for field, bad in (("format", "xml"), ("system_prompt", 5)):   # a hand-edited agentprm.json names itself
        (tmp_path / "agentprm.json").write_text(json.dumps({"prompt": {field: bad}}))
        with pytest.raises(UserError, match=r"agentprm.json: bad field 'prompt' \(prompt "):
            PromptConfig.load(tmp_path)
    with pytest.raises(ValueError, match="prompt format 'xml'"):
        state_to_messages(state, fmt="xml")
