"""A real headless Chromium (the system's, ``/usr/bin/chromium``) driven by Playwright."""

from __future__ import annotations

import contextlib
import shutil
import struct
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from playwright.async_api import Browser, async_playwright

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Without the network flags Chromium keeps trying to reach Google's hosts, which this
machine's closed network refuses."""


def chromium_path() -> str:
    """The system's Chromium (``scripts/test`` installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("no chromium on the PATH: scripts/test installs it (apt-get install chromium)")
    return found


@contextlib.asynccontextmanager
async def chromium(flags: Sequence[str] = ()) -> AsyncIterator[Browser]:
    """Start a headless Chromium (with ``flags`` besides ``CHROMIUM_FLAGS``); closed on exit."""
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=chromium_path(), args=[*CHROMIUM_FLAGS, *flags]
        )
        try:
            yield browser
        finally:
            await browser.close()


def png_size(path: Path) -> tuple[int, int]:
    """The width and height of a PNG image (from its IHDR chunk)."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG image")
    width, height = struct.unpack(">II", head[16:24])
    return width, height
