"""Screenshots of a run's viewer page (agentprm view) in headless Chromium, for docs/viewer.md: the results table, and
one beam-search episode turn by turn with the candidates it weighed and their scores.

    python scripts/view_screenshots.py runs/quickstart --out docs/img

Writes <out>/viewer-results.png and <out>/viewer-episode.png. The episode shown is the shortest won episode of the
first beam row with Q_i that weighed more than one candidate at some turn (ties: the first in the page's order).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from agentprm.io import atomic_path
from agentprm.view.browser import headless_chromium
from agentprm.view.collect import collect_run
from agentprm.view.page import view_run


def shot(element, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(element.screenshot_as_png)
    print(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    args = ap.parse_args()
    page = view_run(args.run_dir)
    data = collect_run(args.run_dir)
    beam = next(r["name"] for r in data["rows"] if r["search"].startswith("beam") and r["saved"]
                and not r["search"].endswith("uniform"))
    episode = min((e for e in data["episodes"] if e["row"] == beam and e["won"]
                   and any(len(s["cands"]) > 1 for s in e["steps"])), key=lambda e: e["turns"])
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser = headless_chromium(1300, 3000)
    try:
        browser.get(page.resolve().as_uri())
        shot(browser.find_element(By.ID, "sec-results"), args.out / "viewer-results.png")
        Select(browser.find_element(By.ID, "f-row")).select_by_value(beam)
        Select(browser.find_element(By.ID, "f-outcome")).select_by_value("won")
        browser.find_element(By.CSS_SELECTOR, f'#episodes tr[data-id="{beam}/{episode["id"]}"]').click()
        shot(browser.find_element(By.ID, "sec-episodes"), args.out / "viewer-episode.png")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
