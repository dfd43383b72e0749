"""The package layout follows the stages: a module may import from its own stage and the ones before it, never from a
later one (docs/architecture.md). Walks every import in agentprm/, those inside functions included."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "agentprm"
# earliest first; a package (or top-level module) of agentprm may import only from its own layer and earlier ones
LAYERS = [
    ("__init__", "errors", "io", "outputs", "lazy", "progress", "ranges", "registry",
     "tracking"),                   # the package's version; shared utilities
    ("envs",),                      # text environments (ALFWorld), the env pool
    ("data",),                      # the records stages pass on: trajectories, tables, summaries
    ("models", "train"),            # model presets/loaders, the one training core
    ("agent",),                     # the agent's state, prompts, tokenizer, LM policies, checkpoints
    ("rollout",),                   # stage 1: play π, branch and oracle continuations
    ("targets",),                   # Q-targets, pairs, shaping
    ("prm",),                       # stage 2: the PRM, its losses, the value model
    ("search",),                    # test-time search with a critic: Best-of-N, beam
    ("policy",),                    # stage 3: policy updates
    ("eval",),                      # paired statistics
    ("reason",),                    # verifiable reasoning: problems, checkers, step labels, step PRMs, token-level RL
    ("loop",),                      # the iteration, algorithms, sweeps
    ("view",),                      # the run viewer: a run folder as one HTML page
    ("commands", "cli", "__main__"),
]
LAYER = {name: k for k, names in enumerate(LAYERS) for name in names}


def _unit(module: str) -> str:
    """"agentprm.prm.train" -> "prm"; a name defined in agentprm/__init__.py (`__version__`) -> "__init__"."""
    unit = module.split(".")[1] if module.count(".") else "__init__"
    return unit if unit in LAYER else "__init__"


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                                                     if node.module == "agentprm"]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in found if m.startswith("agentprm.")]


def test_every_unit_of_the_package_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert units - set(LAYER) == set()


def test_imports_follow_the_stage_order():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        here = _unit(".".join(rel.parts))
        for line, module in imports(path):
            there = _unit(module)
            if LAYER[there] > LAYER[here]:
                wrong.append(f"{rel}.py:{line} ({here}) imports {module} ({there}, a later stage)")
    assert wrong == []


def test_the_check_sees_a_backward_import(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from agentprm.policy.sft import train_sft\n")
    assert imports(path) == [(2, "agentprm.policy.sft")]
    assert LAYER[_unit("agentprm.policy.sft")] > LAYER[_unit("agentprm.prm.train")]


def module_level_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when `path` is imported: at module level (inside `try`/`if` too), not those
    inside functions or under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            elif isinstance(node, (ast.If, ast.Try)):
                for part in (node.body, node.orelse, *([h.body for h in node.handlers] if isinstance(node, ast.Try)
                                                       else []), getattr(node, "finalbody", [])):
                    visit(part)
            elif isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.module and
                                                  node.level == 0):
                found.append(node)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


def module_imports(path: Path) -> set[str]:
    """The agentprm modules (and names of them) `path` imports when it is imported."""
    found: set[str] = set()
    for node in module_level_imports(path):
        if isinstance(node, ast.ImportFrom):
            found.update([node.module] + [f"{node.module}.{a.name}" for a in node.names])
        else:
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("agentprm.")}


def import_cycles(root: Path) -> list[list[str]]:
    """Cycles in the graph of module-level imports between the modules under `root` (a package folder)."""
    modules = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {name: {m for m in module_imports(path) if m in modules and m != name} for name, path in modules.items()}
    cycles, state = [], {}

    def walk(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    return cycles


def test_no_import_cycles_inside_the_package():
    """A module-level cycle fails or half-initialises a module depending on which side is imported first; the
    algorithm registry once hid one behind importlib (loop/config -> loop/algos -> loop/policy_stage -> loop/config).
    Registrations are now plain imports, so the check sees them. (Imports inside functions, for optional heavy
    dependencies, are not module-level and may point back.)"""
    assert import_cycles(ROOT) == []


def test_the_cycle_check_sees_a_cycle(tmp_path):
    pkg = tmp_path / "agentprm"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("from agentprm.a.x import f\n")
    (pkg / "a" / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import agentprm.a.y\n"
                                    "def f():\n    from agentprm.a.y import g\n")
    (pkg / "a" / "y.py").write_text("import agentprm.a.x\n")
    assert import_cycles(pkg) == []                    # the back edges are lazy or for type checkers only
    (pkg / "a" / "x.py").write_text("from agentprm.a.y import g\n")
    assert import_cycles(pkg) == [["agentprm.a.x", "agentprm.a.y", "agentprm.a.x"]]


# Imports inside functions are for what is slow to import and not needed by every caller: torch and what loads it,
# Ray, vLLM's client, the ALFWorld engine, ScienceWorld's and its py4j bridge (optional), matplotlib, scipy, pyarrow, the optional trackers (for `--help`, configs and
# the model-free commands). A command module (and cli.py) imports its implementation when it runs: that is what keeps `agentprm
# --help` to the parser (tests/test_cli_help.py). Anything else belongs at the top of the module.
LAZY_DEPENDENCIES = {"torch", "transformers", "peft", "accelerate", "ray", "vllm", "httpx", "alfworld", "textworld",
                     "fast_downward", "matplotlib", "scipy", "pyarrow", "mlflow", "wandb", "tensorboard", "selenium",
                     "safetensors", "scienceworld", "py4j"}
LAZY_MODULES = ("agentprm.commands", "agentprm.cli")


def _modules(root: Path) -> dict[str, Path]:
    return {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in root.rglob("*.py")}


def _lazy_exports(modules: dict[str, Path]) -> dict[str, str]:
    """"agentprm.models.load_causal_lm" -> "agentprm.models.presets": names a package re-exports on first use
    (agentprm/lazy.py), so that importing the name loads its home module."""
    found = {}
    for name, path in modules.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and "lazy_exports" in ast.unparse(node.value):
                homes = node.value.args[1]
                for key, home in zip(homes.keys, homes.values):
                    found[f"{name}.{key.value}"] = home.value if home.value.startswith("agentprm.") \
                        else f"{name}.{home.value}"
    return found


def _external_imports(path: Path) -> set[str]:
    """Top-level distributions a module imports when it is imported."""
    return {(node.module if isinstance(node, ast.ImportFrom) else a.name).split(".")[0]
            for node in module_level_imports(path) for a in node.names}


def needless_function_imports(root: Path) -> list[str]:
    """Imports inside functions (outside LAZY_MODULES) that load none of LAZY_DEPENDENCIES the module does not load
    already and close no import cycle: they could be at the top of the module, where a reader looks for them."""
    modules, wrong = _modules(root), []
    lazy = _lazy_exports(modules)

    def home(name: str) -> str:   # the module that defines or is `name` ("agentprm.models.load_causal_lm" -> presets)
        name = lazy.get(name, name)
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    def with_packages(name: str) -> set[str]:   # importing a.b.c runs a/__init__, a/b/__init__ first
        parts = name.split(".")
        return {".".join(parts[:k]) for k in range(1, len(parts) + 1)} & set(modules)

    graph = {name: set().union(*[with_packages(home(m)) for m in module_imports(path)], with_packages(name)) - {name}
             for name, path in modules.items()}
    closure: dict[str, set[str]] = {}

    def loads(name: str) -> set[str]:   # the agentprm modules importing `name` runs
        if name not in closure:
            closure[name], todo = {name}, [name]
            while todo:
                for nxt in graph[todo.pop()] - closure[name]:
                    closure[name].add(nxt)
                    todo.append(nxt)
        return closure[name]

    def heavy(name: str) -> set[str]:
        return set().union(*[_external_imports(modules[m]) for m in loads(name)]) & LAZY_DEPENDENCIES

    for name, path in sorted(modules.items()):
        if name.startswith(LAZY_MODULES):
            continue
        for func in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                else:
                    continue
                needed = False
                for target in targets:
                    if target.startswith("agentprm."):
                        there = home(target)
                        needed |= name in loads(there) or bool(heavy(there) - heavy(name))
                    else:
                        needed |= target.split(".")[0] in LAZY_DEPENDENCIES - heavy(name)
                if not needed:
                    wrong.append(f"{path.relative_to(root.parent)}:{node.lineno} {func.name}(): {ast.unparse(node)}")
    return wrong


def test_imports_inside_functions_are_for_heavy_dependencies_only():
    """206 imports inside functions hid the wiring; those left load torch, Ray, the engine, ... lazily, or
    close a cycle (envs/pool.py opens a Ray pool from envs/ray_pool.py, which extends it)."""
    assert needless_function_imports(ROOT) == []


def test_a_package_re_exports_only_its_own_names():
    """A lazy re-export from another package (policy/ once re-exported agent's save_policy) is an import that no
    import statement shows: a package's `__init__` names its own modules only."""
    foreign = {name: home for name, home in _lazy_exports(_modules(ROOT)).items()
               if not home.startswith(name.rsplit(".", 1)[0] + ".")}
    assert foreign == {}


def test_the_function_import_check_sees_a_needless_one(tmp_path):
    pkg = tmp_path / "agentprm"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "heavy.py").write_text("import torch\n")
    (pkg / "a" / "light.py").write_text("def f():\n    from agentprm.a.heavy import g\n\n"
                                        "def h():\n    import json\n    import scipy.stats\n")
    assert needless_function_imports(pkg) == ["agentprm/a/light.py:5 h(): import json"]


def test_a_toy_algorithm_is_one_registered_function(tmp_path, generated_tasks, tiny_policy):
    """An algorithm is its recipe, registered by name: this one plays its rollouts and keeps π_{i-1}; the loop runs it
    (stages, evaluation, resume, results) with nothing else touched; a second registration of the name is refused."""
    import json

    import pytest
    from test_loop import mini_config

    from agentprm.cli import main
    from agentprm.loop.algos import ALGORITHMS, IterationResult, register_algorithm

    seen = []

    @register_algorithm("test-keep")
    def keep(ctx, prev):
        seen.append((ctx.i, len(ctx.tasks), ctx.rollouts(prev).name))
        return IterationResult(prev)

    try:
        with pytest.raises(ValueError, match="'test-keep' is registered already"):
            register_algorithm("test-keep")(keep)
        cfg = mini_config(tmp_path, generated_tasks, tiny_policy, algo="test-keep", iterations=2)
        assert main(["loop", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
        rows = json.loads((tmp_path / "run" / "results.json").read_text())["rows"]
        assert [r["policy"] for r in rows] == ["pi0", "pi1", "pi2"]
        assert rows[0]["per_task"] == rows[1]["per_task"] == rows[2]["per_task"]   # the same greedy policy
        assert seen == [(1, 6, "rollouts"), (2, 6, "rollouts")]
    finally:
        del ALGORITHMS["test-keep"]


def test_cli_defaults_are_the_loop_defaults():
    """Each stage's command reads the loop's section of that stage for its flags: running the stages by hand with
    default flags does what the loop does with its default config."""
    import dataclasses

    from agentprm.cli import build_parser
    from agentprm.commands.common import config_from_args
    from agentprm.loop.config import LoopConfig

    loop = LoopConfig()
    parse = build_parser().parse_args
    commands = {  # command line -> (loop section, fields the command has as flags)
        "train-prm --targets t --init i --out o": (loop.prm, ("loss", "epochs", "lr", "batch_size")),
        "train-policy --policy p --prm q --rollouts r --out o": (
            loop.policy, tuple(f.name for f in dataclasses.fields(loop.policy) if f.name not in ("critic", "lora"))),
        "targets mc --rollouts r --out o": (loop.targets, ("gamma",)),
        "rollout --policy p --tasks t --out o": (
            loop.rollout, ("per_task", "temperature", "mode", "max_steps", "num_envs", "workers")),
        "eval --policy p --tasks t": (loop.eval, ("episodes_per_task", "max_steps")),
        "sft --demos d --out o": (loop.policy0.sft, ("model", "lr", "steps", "epochs", "batch_size", "grad_accum",
                                                     "time_budget_s", "won_only", "renumber_copies",
                                                     "checkpoint_every")),
    }
    for line, (section, names) in commands.items():
        args = parse(line.split())
        assert {n: getattr(args, n) for n in names} == {n: getattr(section, n) for n in names}, line
    assert parse("eval --policy p --tasks t".split()).num_envs == loop.rollout.num_envs
    # nested sections (LoRA) are flags with the section's name as prefix, read back into the same dataclass
    for line, section in (("train-policy --policy p --prm q --rollouts r --out o", loop.policy),
                          ("train-prm --targets t --init i --out o", loop.prm), ("sft --demos d --out o", loop.policy0.sft)):
        assert config_from_args(type(section.lora), parse(line.split()), prefix="lora_") == section.lora, line
    lora = config_from_args(type(loop.prm), parse("train-prm --targets t --init i --out o --lora-r 8 --lora-merge"
                                                  .split()), init="i").lora
    assert (lora.r, lora.merge, lora.alpha) == (8, True, loop.prm.lora.alpha)
    # and a flag sets the field it names
    assert parse("train-prm --targets t --init i --out o --lr 0.1 --loss pqm".split()).lr == 0.1
    assert parse("train-policy --policy p --prm q --rollouts r --out o --method kl-distill --no-distinct"
                 .split()).method == "kl-distill"


def test_configs_of_earlier_versions_still_load(tmp_path):
    """Run folders written before `policy0.sft` was the SFT section keep resuming: the old flat names are read into
    it (and a value given both ways keeps the new one)."""
    from agentprm.loop.config import from_dict

    cfg = from_dict({"policy0": {"retrain": True, "sft_epochs": 1.5, "sft_model": "small"}})
    assert (cfg.policy0.sft.epochs, cfg.policy0.sft.model, cfg.policy0.retrain) == (1.5, "small", True)
    assert from_dict({"policy0": {"sft_epochs": 1.0, "sft": {"epochs": 2.0}}}).policy0.sft.epochs == 2.0


def test_a_toy_update_and_a_toy_critic_plug_in_from_one_file(tmp_path, generated_tasks, tiny_policy):
    """A stage-3 update is one registered function with one signature: this one leaves π as it is and records how
    many states it saw and what the critic scored them. The loop's config check, its stage 3, the saved policy's
    record and the report's history all take it with nothing else touched; the loop's own checks read its flags (not
    watchable: the hacking detector is refused). A critic is any object with `score`: the toy one here ranks by
    reply length and drives Best-of-N and beam search through the same protocol."""
    import json

    import pytest
    import torch
    from test_loop import mini_config

    from agentprm.agent.critic import Critic
    from agentprm.agent.lm import LMAgent
    from agentprm.cli import main
    from agentprm.envs.alfworld.tasks import load_tasks
    from agentprm.errors import UserError
    from agentprm.loop.config import from_dict
    from agentprm.policy.update import UPDATES, UpdateResult, register_update
    from agentprm.search import BestOfNAgent, play_beam

    class LongestReply:
        def score(self, states, replies):
            return torch.tensor([float(len(r)) for r in replies])

    @register_update("test-noop")
    def noop(policy, critic, states, cfg, ctx):
        scores = critic.score(states[:4], [s.admissible[0] for s in states[:4]])
        return [{"step": 1, "loss": 0.0}], {"states_seen": len(states), "scored": len(scores), "seed_used": ctx.seed}

    try:
        with pytest.raises(ValueError, match="'test-noop' is registered already"):
            register_update("test-noop")(noop)
        with pytest.raises(UserError, match="'policy.method' test-noop is not online DPO"):
            from_dict({"policy": {"method": "test-noop"}, "hacking": {"enabled": True}})
        cfg = mini_config(tmp_path, generated_tasks, tiny_policy, policy={"method": "test-noop"})
        assert main(["loop", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 0
        meta = json.loads((tmp_path / "run" / "iter_1" / "policy" / "agentprm.json").read_text())
        result = UpdateResult.read(meta)
        assert result.method == "test-noop" and result.seed == 1 and result.history == [{"step": 1, "loss": 0.0}]
        assert result.details["states_seen"] > 0 and result.details["scored"] == 4 and result.details["seed_used"] == 1
        assert result.reference.endswith("policy_0")
    finally:
        del UPDATES["test-noop"]

    critic = LongestReply()
    assert isinstance(critic, Critic)
    tasks = load_tasks(generated_tasks.eval)[:1]
    sampler = LMAgent.load(tiny_policy, temperature=1.0, distinct=True, seed=0)
    from agentprm.rollout.play import play_tasks

    # distinct samples, more than any state has commands: Best-of-N sees them all and keeps the critic's favourite
    episodes, _ = play_tasks(BestOfNAgent(sampler, critic, 500), tasks, per_task=1, seed=0, max_steps=3, tag="toy",
                             workers=1, progress=False)
    assert [len(s.action) for s in episodes[0].steps] == [max(map(len, s.admissible)) for s in episodes[0].steps]
    beam, summary = play_beam(tasks, sampler, critic, width=1, expand=500, max_steps=3, seed=0, workers=1)
    assert [len(s.action) for s in beam[0].steps] == [max(map(len, s.admissible)) for s in beam[0].steps]
