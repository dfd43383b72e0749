"""Headless Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium) for looking at the viewer page
the way a person's browser does: the browser test and scripts/view_screenshots.py. Optional: `make browser` installs
the two packages, selenium is in the test extras."""
from __future__ import annotations

import shutil

from agentprm.errors import UserError


def missing() -> str:
    """What is missing for `headless_chromium`, or "" when nothing is."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium (pip install selenium)"
    for program, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(program) is None:
            return f"{program} (apt-get install {package}, or make browser)"
    return ""


def headless_chromium(width: int = 1400, height: int = 1000):
    """A selenium Chrome driver on the system's Chromium, headless, its console log kept (driver.get_log)."""
    if need := missing():
        raise UserError(f"headless Chromium needs {need}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
