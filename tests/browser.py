"""Headless Chromium (Debian's ``chromium``) driven by Playwright, for the browser tests."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from typing import Any

from .conftest import require

CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The Chromium binary: $TOOLSTREAM_CHROMIUM, or Debian's chromium on the PATH."""
    explicit = os.environ.get("TOOLSTREAM_CHROMIUM")
    if explicit:
        return explicit
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium (skips without it, fails under REQUIRE_ALL); open pages in it
    with :func:`new_page`. One per test module (the ``browser`` fixture) keeps the
    browser tests' start-up small."""
    path = chromium_path()
    require(path is not None, "headless Chromium not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - a test dependency
        require(False, "playwright is not installed")
        raise
    assert path is not None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def new_page(browser: Any, **context: Any) -> Iterator[Any]:
    """A page in a fresh context of ``browser`` (its own storage, as a new window has;
    ``context``: Playwright's ``new_context`` options, such as ``viewport``)."""
    opened = browser.new_context(**context)
    try:
        yield opened.new_page()
    finally:
        opened.close()


@contextlib.contextmanager
def browser_page() -> Iterator[Any]:
    """A fresh page in a browser of its own."""
    with chromium() as browser, new_page(browser) as page:
        yield page


def with_page(page: bytes, app: Any, scripts: Mapping[str, bytes] | None = None) -> Any:
    """An ASGI app serving ``page`` (HTML) to every plain HTTP GET of ``/``, and each of
    ``scripts`` (path -> JavaScript) at its path, and passing everything else (the event
    stream, the socket) to ``app``."""
    served = {"/": (page, b"text/html; charset=utf-8")}
    for path, script in (scripts or {}).items():
        served[path] = (script, b"text/javascript; charset=utf-8")

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        found = served.get(scope["path"]) if scope["type"] == "http" else None
        if found is not None and scope["method"] == "GET":
            body, kind = found
            headers = [(b"content-type", kind)]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return wrapped


def wait_for(page: Any, expression: str, timeout: float = 20.0) -> Any:
    """Wait until the JavaScript ``expression`` is truthy in ``page``; return its value."""
    page.wait_for_function(expression, timeout=timeout * 1000)
    return page.evaluate(expression)
