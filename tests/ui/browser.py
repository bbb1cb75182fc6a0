"""Debian's headless Chromium driven by playwright, for the page and journey tests.

playwright's own browser download is never used: the browser is
``/usr/bin/chromium`` (installed by ``scripts/bootstrap``), started with a new,
empty profile and the flags below, and stopped with the context manager.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[BrowserContext]:
    """A browser context (one window, fresh profile); the browser is stopped on exit."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/bootstrap (it installs chromium)")
    profile = tempfile.mkdtemp(prefix="flowctl-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=list(CHROMIUM_FLAGS),
                viewport={"width": width, "height": height},
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
