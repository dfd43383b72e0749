"""`import agentprm` is the public API, and docs/python-api.md's walk-through runs as written."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import agentprm

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"


def test_every_public_name_resolves_and_import_stays_light():
    for name in agentprm.__all__:
        assert getattr(agentprm, name) is not None, name
    out = subprocess.run([sys.executable, "-c", "import sys, agentprm; print('torch' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_walk_through_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 5
    # run as an interactive session runs it: no main file the env workers would import again (a script file needs
    # the __main__ guard the page names)
    run = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].split()[-1] == "Q-targets"
    assert (tmp_path / "api-demo" / "pi1" / "agentprm.json").is_file()
    rates = [float(x) for x in lines[2].split()[:4]]
    assert all(0.0 <= r <= 1.0 for r in rates[:3]) and -1.0 <= rates[3] <= 1.0
