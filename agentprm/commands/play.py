"""`agentprm play --game DIR`: play one ALFWorld game yourself in the terminal.

Each turn shows the observation and the numbered admissible commands; type a number, or any command as free
text (an inadmissible one is answered "Nothing happens." like for an agent); `q` or end of input quits."""
from __future__ import annotations

import argparse
from typing import Callable

from agentprm.envs.base import TextEnv, Turn
from agentprm.errors import UserError

QUIT = ("q", "quit", "exit")


def register(sub) -> None:
    p = sub.add_parser("play", help="play an ALFWorld game yourself in the terminal", description=__doc__)
    p.add_argument("--game", required=True, metavar="DIR", help="a game folder (game.tw-pddl + traj_data.json)")
    p.add_argument("--max-steps", type=int, default=50, metavar="N", help="step budget (default 50, as ALFWorld eval)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agentprm.envs.alfworld.engine import AlfWorldEnv

    env = None
    try:   # a broken or hostile game fails here as it fails an episode of `eval`: an env error, not a traceback
        env = AlfWorldEnv(args.game, max_steps=args.max_steps)
        play(env, read_line, args.max_steps)
    except UserError:
        raise
    except (Exception, SystemExit) as e:   # Fast Downward exits the process on a problem it cannot translate
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise UserError(f"{args.game}: the game cannot be played ({type(e).__name__}: {first})") from None
    finally:
        if env is not None:
            env.close()
    return 0


def read_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        return None


def show(turn: Turn) -> None:
    print(f"\n{turn.observation.strip()}\n")
    for i, command in enumerate(turn.admissible, 1):
        print(f"  {i:2d}. {command}")


def choose(turn: Turn, ask: Callable[[str], str | None], step: int, budget: int) -> str | None:
    """The command the player picked (None to quit); re-asks on empty input or a number out of range."""
    while True:
        answer = ask(f"[step {step + 1}/{budget}] number or command (q quits)> ")
        if answer is None or answer.strip().lower() in QUIT:
            return None
        answer = answer.strip()
        if answer.isdigit():   # '²' counts as a digit too: only a short ASCII number is a choice
            if answer.isascii() and len(answer) <= 6 and 1 <= int(answer) <= len(turn.admissible):
                return turn.admissible[int(answer) - 1]
            print(f"no command {answer[:20]}: choose 1-{len(turn.admissible)}")
        elif answer:
            return answer


def play(env: TextEnv, ask: Callable[[str], str | None], budget: int) -> Turn:
    """Play until the game ends or the player quits; prints the outcome and returns the last turn."""
    turn = env.reset()
    print(f"Task: {turn.task}")
    steps = 0
    while not turn.done:
        show(turn)
        command = choose(turn, ask, steps, budget)
        if command is None:
            print(f"\nQuit after {steps} steps (not won).")
            return turn
        print(f"> {command}")
        turn = env.step(command)
        steps += 1
    print(f"\n{turn.observation.strip()}\n")
    outcome = "Won" if turn.won else "Not won: the step budget ran out"
    print(f"{outcome} after {steps} steps.")
    return turn
