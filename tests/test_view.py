"""The run viewer (agentprm/view/): a miniature loop's run folder → one HTML page, checked as data and in headless
Chromium (Debian's `chromium` + `chromium-driver`, driven by selenium; .ci/run installs them where missing and sets
AGENTPRM_REQUIRE_BROWSER=1, so CI cannot skip the browser test)."""
from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from agentprm.cli import main
from agentprm.view.collect import collect_run
from agentprm.view.page import embedded_json, render
from test_loop import mini_config


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory, generated_tasks, tiny_policy) -> Path:
    """One finished miniature loop (π0, π1, Best-of-2 and beam with Q1 and their uniform controls)."""
    root = tmp_path_factory.mktemp("view")
    run = root / "run"
    assert main(["loop", "--config", str(mini_config(root, generated_tasks, tiny_policy)), "--run-dir", str(run)]) == 0
    return run


def saved_episodes(run: Path) -> dict[str, pq.ParquetFile]:
    return {p.stem: pq.read_table(p) for p in sorted((run / "evals").glob("*.parquet"))}


@pytest.mark.slow   # a miniature loop run first (~1 min): make test-all and CI
def test_the_page_holds_every_saved_episode_with_its_returns_and_scores(mini_run):
    data = collect_run(mini_run)
    tables = saved_episodes(mini_run)
    assert (mini_run / "view.html").is_file()   # the loop wrote its page
    assert len(data["episodes"]) == sum(len(set(t["episode_id"].to_pylist())) for t in tables.values()) > 0
    assert {r["stage"] for r in data["rows"] if r["saved"]} == set(tables)
    gamma = data["run"]["gamma"]
    for e in data["episodes"]:
        steps = e["steps"]
        assert len(steps) == e["turns"] >= 1
        # the one-sample MC return from turn t: γ^(T-1-t) if the episode was won, else 0
        expected = [gamma ** (len(steps) - 1 - t) * e["won"] for t in range(len(steps))]
        assert np.allclose([s["mc"] for s in steps], expected, atol=1e-4)
    searched = [s for e in data["episodes"] if "bon" in e["row"] or "beam" in e["row"] for s in e["steps"]]
    assert any(s["scores"] for s in searched)
    assert all(len(s["scores"]) in (0, len(s["cands"])) for s in searched)
    # the PRM's held-out metrics and loss history, and π1's update history, are the curves' points
    assert data["curves"]["prm"][0]["iteration"] == 1 and data["curves"]["prm_loss"][1]
    assert data["curves"]["update"][1]
    # the learning curve: greedy π0 and π1 against the env steps their training rollouts had played
    results = json.loads((mini_run / "results.json").read_text())
    assert data["curve"] == results["curve"] and [c["iteration"] for c in data["curve"]] == [0, 1]
    assert data["curve"][0]["env_steps"] == 0 < data["curve"][1]["env_steps"]


def test_text_from_the_game_cannot_end_the_embedded_data():
    data = {"run": {"dir": "r"}, "obs": "</script><script>alert(1)</script> <!-- x", "é": "ü"}
    html = render({**data, "rows": [], "episodes": []})
    body = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html, re.S).group(1)
    assert json.loads(body) == {**data, "rows": [], "episodes": []}
    assert json.loads(embedded_json(data)) == data


@pytest.mark.slow   # a miniature loop run first (~1 min): make test-all and CI
def test_view_command_writes_a_page_and_replaces_only_its_own(mini_run, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["view", str(mini_run), "--out", str(out)]) == 0
    first = out.read_text()
    assert '<meta name="generator" content="agentprm' in first and "Chart.js v4" in first
    assert "http://" not in re.sub(r"(//|\*).*", "", first.split("<script>")[0])   # no fetched asset in the head
    assert main(["view", str(mini_run), "--out", str(out)]) == 0   # its own page: replaced
    assert main(["view", str(mini_run), "--out", str(mini_run / "other.html")]) == 0   # inside the run folder too
    assert (mini_run / "other.html").read_text() == first
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    capsys.readouterr()
    assert main(["view", str(mini_run), "--out", str(mine)]) == 2
    assert "agentprm did not write it" in capsys.readouterr().err
    assert mine.read_text() == "<html>my notes</html>"
    assert main(["view", str(tmp_path)]) == 2   # not a run folder: one line, nothing written
    assert "no results.json" in capsys.readouterr().err and not (tmp_path / "view.html").exists()


def _browser():
    from agentprm.view.browser import headless_chromium, missing

    if need := missing():
        if os.environ.get("AGENTPRM_REQUIRE_BROWSER"):
            pytest.fail(f"AGENTPRM_REQUIRE_BROWSER is set but the browser test needs {need}")
        pytest.skip(f"needs {need} (.ci/run installs them)")
    return headless_chromium()


@pytest.mark.slow   # a miniature loop run first (~1 min): make test-all and CI
def test_the_page_works_in_headless_chromium(mini_run, tmp_path):
    from matplotlib.image import imread
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    data = collect_run(mini_run)
    browser = _browser()
    try:
        browser.get((mini_run / "view.html").resolve().as_uri())
        rows = lambda: browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")   # noqa: E731
        assert len(rows()) == len(data["episodes"])
        assert len(browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")) == len(data["rows"])
        assert len(browser.find_elements(By.CSS_SELECTOR, "#comparisons tbody tr")) == len(data["comparisons"])

        Select(browser.find_element(By.ID, "f-outcome")).select_by_value("lost")
        lost = [e for e in data["episodes"] if not e["won"] and not e["error"]]
        assert len(rows()) == len(lost)
        Select(browser.find_element(By.ID, "f-outcome")).select_by_value("")
        bon = next(r["name"] for r in data["rows"] if r["best_of_n"] > 1 and r["saved"])
        Select(browser.find_element(By.ID, "f-row")).select_by_value(bon)
        assert len(rows()) == sum(e["row"] == bon for e in data["episodes"])

        rows()[0].click()   # the first listed episode of the Best-of-N row, turn by turn
        episode = next(e for e in data["episodes"] if e["row"] == bon)
        turns = browser.find_elements(By.CSS_SELECTOR, "#episode .turn")
        assert len(turns) == episode["turns"]
        assert turns[0].find_element(By.CSS_SELECTOR, ".action").text == episode["steps"][0]["action"]
        weighed = [s for s in episode["steps"] if s["cands"]]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#episode .cands tbody tr")) == \
            sum(len(s["cands"]) for s in weighed)
        compare = Select(browser.find_element(By.ID, "compare"))   # the same game played by another row
        others = [e for e in data["episodes"] if e["task_id"] == episode["task_id"] and e is not episode]
        assert len(compare.options) == 1 + len(others)
        compare.select_by_index(1)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#episode-b .turn")) == others[0]["turns"]

        assert browser.find_element(By.ID, "fig-curve").is_displayed()   # the learning curve is drawn
        errors = [m for m in browser.get_log("browser") if m["level"] == "SEVERE"]
        assert errors == []
        png = imread(io.BytesIO(browser.get_screenshot_as_png()), format="png")
        assert png.std() > 0.05 and (png[..., :3] < 0.5).mean() > 0.005   # drawn: text and lines, not blank
        (tmp_path / "shot.png").write_bytes(browser.get_screenshot_as_png())
    finally:
        browser.quit()


def test_the_page_server_serves_the_page_only(tmp_path):
    """`view --serve` answers the page and 404 for anything else of its folder: no other file, no symlink out of it,
    no path that climbs out; a port in use is a one-line error."""
    import threading
    import urllib.error
    import urllib.request

    from agentprm.errors import UserError
    from agentprm.view.page import PageServer

    (tmp_path / "run").mkdir()
    page = tmp_path / "run" / "view.html"
    page.write_text("<html>the page</html>")
    (tmp_path / "run" / "results.json").write_text("{}")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", tmp_path / "run" / "secret.txt")
    server = PageServer(page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path in ("/", "/view.html", "/view.html?x=1"):
            with urllib.request.urlopen(url + path, timeout=30) as r:
                assert r.status == 200 and r.read() == b"<html>the page</html>"
        for path in ("/secret.txt", "/results.json", "/../secret.txt", "/%2e%2e/secret.txt", "/run/view.html"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(url + path, timeout=30)
            assert e.value.code == 404, path
        with pytest.raises(UserError, match="cannot listen"):
            PageServer(page, server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def write_results(run: Path, results) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.json").write_text(json.dumps(results))
    return run


ROW = {"policy": "pi0", "iteration": 0, "best_of_n": 1, "search": "", "success_rate": 0.5, "ci95": [0.2, 0.8],
       "episodes": 4}


@pytest.mark.parametrize("results, field", [
    ([ROW], "JSON object"), ({"rows": {"a": 1}}, "'rows'"), ({"rows": [5]}, "rows[0]"),
    ({"rows": [{k: v for k, v in ROW.items() if k != "ci95"}]}, "rows[0].ci95"),
    ({"rows": [{**ROW, "episodes": "4"}]}, "rows[0].episodes"),
    ({"rows": [{**ROW, "policy": "../../x"}]}, "rows[0].policy"),
    ({"rows": [{**ROW, "policy": "a/b"}]}, "rows[0].policy")])
def test_a_results_file_the_viewer_cannot_read_is_one_line_naming_the_field(tmp_path, capsys, results, field):
    run = write_results(tmp_path / "run", results)
    assert main(["view", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "results.json" in err and field in err, err
    assert not (run / "view.html").exists()


def test_an_eval_file_that_links_out_of_the_run_is_not_embedded(tmp_path):
    import pyarrow as pa

    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"x": [1]}), outside)
    run = write_results(tmp_path / "run", {"rows": [ROW]})
    (run / "evals").mkdir()
    os.symlink(outside, run / "evals" / "pi0.parquet")
    data = collect_run(run)
    assert data["rows"][0]["saved"] is False and data["episodes"] == []


def test_non_finite_numbers_become_null_so_the_page_data_parses(tmp_path):
    run = write_results(tmp_path / "run", {"rows": [{**ROW, "success_rate": float("nan"), "ci95": [float("-inf"), 1.0]}],
                                           "wall_seconds": float("inf")})
    assert main(["view", str(run)]) == 0
    html = (run / "view.html").read_text()
    body = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html, re.S).group(1)
    data = json.loads(body, parse_constant=lambda c: pytest.fail(f"{c} in the page's data"))
    assert data["rows"][0]["success_rate"] is None and data["rows"][0]["ci95"] == [None, 1.0]
    assert data["run"]["wall_seconds"] is None
