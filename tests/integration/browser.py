"""A real browser for the console's tests: Debian's ``chromium`` driven by Playwright.

Why the system binary: Playwright's own browser download cannot reach its CDN here (nor on many
CI networks), so the tests point ``executable_path`` at ``chromium``, which the project's setup
installs (``./dev test`` runs ``ensure_chromium`` through apt when it is missing; so does this
module, once, when run as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CANDIDATES = ("chromium", "chromium-browser")


def ensure_chromium() -> str:
    """The path of the system's Chromium, installed with apt if missing (idempotent)."""
    for name in CANDIDATES:
        if found := shutil.which(name):
            return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            subprocess.run(step, check=False, env=env, capture_output=True, timeout=900)
        for name in CANDIDATES:
            if found := shutil.which(name):
                return found
    pytest.fail("the browser tests need Debian's chromium: apt-get update && apt-get install -y "
                "chromium (./dev test does this when run as root)")


def screenshot(page, name: str) -> None:
    """Save a PNG for docs/console.md when ``CRONSTREAM_SCREENSHOTS=1`` (``./dev screenshots``):
    the README's pictures come from this run, never from a hand-made capture."""
    if os.environ.get("CRONSTREAM_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
