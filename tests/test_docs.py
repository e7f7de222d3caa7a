"""Every ```python example in the README and docs/ runs (and keeps running)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

EXAMPLES = [
    pytest.param(page, i, code, id=f"{page.name}-{i}")
    for page in PAGES
    for i, code in enumerate(BLOCK.findall(page.read_text()))
]


def test_every_page_is_linked_from_the_index() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    for page in PAGES[1:]:
        if page.name != "index.md":
            assert f"({page.name})" in index, f"docs/index.md does not link {page.name}"


@pytest.mark.parametrize(("page", "index", "code"), EXAMPLES)
def test_example_runs(
    page: Path,
    index: int,
    code: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = None
    if "TOOLSTREAM_REDIS_URL" in code:  # the example talks to a Redis of its own
        from tests.redis_server import RedisServer, require_redis

        require_redis()
        server = RedisServer(tmp_path)
        server.start(persist=False)
        monkeypatch.setenv("TOOLSTREAM_REDIS_URL", server.url)
    try:
        _run(page, index, code)
    finally:
        if server is not None:
            server.stop()


def _run(page: Path, index: int, code: str) -> None:
    namespace: dict[str, object] = {"__name__": f"example_{page.stem}_{index}"}
    exec(compile(code, f"{page.name} example {index}", "exec"), namespace)
