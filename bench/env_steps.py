"""ALFWorld env speed: stock TextWorld vs `AlfWorldEnv` with the step caches, on the same games and actions.

    python bench/env_steps.py [--games DIR] [--num 12] [--random-steps 30] [--seed 0] [--json PATH]

Without --games, `--num` eval games (all task types, round robin) are generated into a temp folder. Each game
is played as two episodes on one env: its walkthrough, then seeded random admissible actions (drawn here,
untimed, before either side runs). Each side then replays the same actions in its own fresh process, one after
the other (so they do not compete for cores, and the caches start cold):
  stock: `textworld.start` with alfworld's wrappers, no caches (what ALFWorld itself runs);
  ours:  `AlfWorldEnv(fast=True)` (agentprm.envs.alfworld.speedups).
Transcripts (observation, admissible commands, won after every reset and step) must be byte-identical; the
script exits 1 if they differ. It prints steps/s for both and the ratio (target >= 2x).
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentprm.envs.alfworld.engine import GAME_FILE, AlfWorldEnv
from agentprm.envs.alfworld.setup import import_alfworld
from agentprm.envs.alfworld.tasks import TaskSpec, load_tasks
from agentprm.errors import UserError
from agentprm.io import provenance, write_json

TARGET_RATIO = 2.0
NO_BUDGET = 10**6  # the bench replays fixed action lists: no truncation


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--games", metavar="DIR", help="a task folder (tasks.jsonl or official ALFWorld data); "
                                                  "default: generate --num eval games into a temp folder")
    p.add_argument("--num", type=int, default=12, help="number of games (default 12)")
    p.add_argument("--random-steps", type=int, default=30, help="random admissible actions per game (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="write the numbers here")
    p.add_argument("--worker", choices=("stock", "ours"), help=argparse.SUPPRESS)  # internal: one timed side
    p.add_argument("--plan", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------- the action plan


def bench_games(args: argparse.Namespace, scratch: Path) -> list[TaskSpec]:
    if args.games:
        return load_tasks(args.games)[:args.num]
    from agentprm.envs.alfworld.generate import generate_tasks

    return generate_tasks(scratch / "games", "eval", args.num, args.seed, progress=False)


def plan_actions(game: str, random_steps: int, rng: random.Random) -> list[list[str]]:
    """The walkthrough (when the game has one), then `random_steps` random admissible actions."""
    walkthrough = json.loads((Path(game) / GAME_FILE).read_text()).get("walkthrough") or []
    env = AlfWorldEnv(game, max_steps=NO_BUDGET)
    turn = env.reset()
    actions = []
    for _ in range(random_steps):
        if turn.done:
            break
        actions.append(rng.choice(sorted(turn.admissible)))
        turn = env.step(actions[-1])
    env.close()
    return [walkthrough, actions] if walkthrough else [actions]


# --------------------------------------------------------------------------------------- one timed side


class StockEnv:
    """What ALFWorld runs: textworld.start with alfworld's wrappers, without our caches."""

    def __init__(self, game: str):
        import_alfworld()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self._env = textworld.start(str(Path(game) / GAME_FILE), request_infos=infos,
                                    wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])

    def reset(self) -> list:
        return self._record(self._env.reset())

    def step(self, action: str) -> list:
        state, _, _ = self._env.step(action)
        return self._record(state)

    @staticmethod
    def _record(state) -> list:
        return [state.feedback, list(state.admissible_commands), bool(state["won"])]


class OurEnv:
    def __init__(self, game: str):
        self._env = AlfWorldEnv(game, max_steps=NO_BUDGET, fast=True)

    def reset(self) -> list:
        return self._record(self._env.reset())

    def step(self, action: str) -> list:
        return self._record(self._env.step(action))

    @staticmethod
    def _record(turn) -> list:
        return [turn.observation, list(turn.admissible), turn.won]


def import_engine() -> float:
    """Import TextWorld and alfworld's wrappers (the same for both sides); returns the seconds it took."""
    start = time.perf_counter()
    import_alfworld()
    import textworld  # noqa: F401
    import alfworld.agents.environment.alfred_tw_env  # noqa: F401

    return time.perf_counter() - start


def run_side(side: str, plan: list[dict]) -> dict:
    """Replay the plan, timing imports, env construction (load), resets and steps separately."""
    make = StockEnv if side == "stock" else OurEnv
    import_s = import_engine()
    load_s = reset_s = step_s = 0.0
    steps = resets = 0
    transcripts = []
    for game in plan:
        start = time.perf_counter()
        env = make(game["game"])
        load_s += time.perf_counter() - start
        for actions in game["episodes"]:
            start = time.perf_counter()
            transcript = [env.reset()]
            reset_s += time.perf_counter() - start
            resets += 1
            start = time.perf_counter()
            transcript += [env.step(a) for a in actions]
            step_s += time.perf_counter() - start
            steps += len(actions)
            transcripts.append(transcript)
    return {"side": side, "steps": steps, "step_s": step_s, "resets": resets, "reset_s": reset_s,
            "loads": len(plan), "load_s": load_s, "import_s": import_s, "transcripts": transcripts}


def run_side_in_subprocess(side: str, plan_file: Path, scratch: Path) -> dict:
    out = scratch / f"{side}.json"
    subprocess.run([sys.executable, __file__, "--worker", side, "--plan", str(plan_file), "--out", str(out)],
                   check=True)
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------------------------ report


def first_difference(a: list, b: list, plan: list[dict]) -> str | None:
    episodes = [(g["task_id"], e) for g in plan for e in range(len(g["episodes"]))]
    for (task_id, episode), ta, tb in zip(episodes, a, b):
        for turn, (ra, rb) in enumerate(zip(ta, tb)):
            if ra != rb:
                return f"{task_id} episode {episode} turn {turn}:\n  stock: {ra!r}\n  ours:  {rb!r}"
        if len(ta) != len(tb):
            return f"{task_id} episode {episode}: {len(ta)} vs {len(tb)} turns"
    return None


def summarise(side: dict) -> dict:
    total = side["load_s"] + side["reset_s"] + side["step_s"]
    return {"steps": side["steps"], "steps_per_s": side["steps"] / side["step_s"],
            "step_ms": 1000 * side["step_s"] / side["steps"], "reset_ms": 1000 * side["reset_s"] / side["resets"],
            "load_s_per_game": side["load_s"] / side["loads"], "total_s": total, "import_s": side["import_s"]}


def report(stock: dict, ours: dict, games: int, identical: bool) -> dict:
    s, o = summarise(stock), summarise(ours)
    numbers = {"games": games, "identical_transcripts": identical, "stock": s, "ours": o,
               "step_speedup": o["steps_per_s"] / s["steps_per_s"], "end_to_end_speedup": s["total_s"] / o["total_s"]}
    print(f"{games} games, {s['steps']} steps, {stock['resets']} resets each; transcripts identical: {identical}")
    print(f"{'':6} {'steps/s':>8} {'ms/step':>8} {'ms/reset':>9} {'s/load':>7} {'total s':>8}")
    for name, n in (("stock", s), ("ours", o)):
        print(f"{name:6} {n['steps_per_s']:8.1f} {n['step_ms']:8.1f} {n['reset_ms']:9.1f} "
              f"{n['load_s_per_game']:7.2f} {n['total_s']:8.2f}")
    verdict = "meets" if numbers["step_speedup"] >= TARGET_RATIO else "MISSES"
    print(f"step speedup {numbers['step_speedup']:.2f}x ({verdict} the {TARGET_RATIO:g}x target); "
          f"end to end (load + resets + steps; imports excluded) {numbers['end_to_end_speedup']:.2f}x")
    return numbers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # before anything imports fast_downward, which overwrites sys.argv
    try:
        return run(args)
    except UserError as e:
        print(f"env_steps: error: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    if args.worker:
        write_json(args.out, run_side(args.worker, json.loads(Path(args.plan).read_text())))
        return 0
    with tempfile.TemporaryDirectory(prefix="agentprm-bench-") as tmp:
        scratch = Path(tmp)
        tasks = bench_games(args, scratch)
        plan = [{"task_id": t.task_id, "game": t.game,
                 "episodes": plan_actions(t.game, args.random_steps, random.Random(f"{args.seed}/{t.task_id}"))}
                for t in tasks]
        write_json(scratch / "plan.json", plan)
        stock = run_side_in_subprocess("stock", scratch / "plan.json", scratch)
        ours = run_side_in_subprocess("ours", scratch / "plan.json", scratch)
    difference = first_difference(stock["transcripts"], ours["transcripts"], plan)
    numbers = report(stock, ours, len(tasks), difference is None)
    if args.json:
        write_json(args.json, {**numbers, "provenance": provenance(vars(args), args.seed)})
    if difference:
        print(f"transcripts differ at {difference}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
