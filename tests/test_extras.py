"""Every optional module, imported without what its extra installs, fails with an
``ImportError`` that names the extra (never a bare ``ModuleNotFoundError``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: (module, a package its extra installs, the extra)
OPTIONAL = [
    ("toolstream.client", "httpx", "client"),
    ("toolstream.client", "httpx_sse", "client"),
    ("toolstream.client", "websockets", "client"),
    ("toolstream.cli", "rich", "cli"),
    ("toolstream.cli", "uvicorn", "cli"),
    ("toolstream.cli", "httpx", "cli"),
    ("toolstream.redis", "redis", "redis"),
    ("toolstream.nats", "nats", "nats"),
    ("toolstream.postgres", "psycopg", "postgres"),
    ("toolstream.otel", "opentelemetry", "otel"),
    ("toolstream.integrations.langchain", "langchain_core", "langgraph"),
    ("toolstream.integrations.langgraph", "langgraph", "langgraph"),
    ("toolstream.integrations.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("toolstream.integrations.openai_agents", "agents", "openai-agents"),
    ("toolstream.integrations.mcp", "mcp", "mcp"),
    ("toolstream.integrations.adk", "google.adk", "adk"),
    ("toolstream.integrations.smolagents", "smolagents", "smolagents"),
]

#: Modules that need no optional package: the ASGI apps run under any server.
PLAIN = ["toolstream.sse", "toolstream.websocket", "toolstream.chat", "toolstream.callback"]


def _import_without(module: str, blocked: list[str]) -> str:
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


@pytest.mark.parametrize(("module", "blocked", "extra"), OPTIONAL)
def test_a_missing_extra_is_named(module: str, blocked: str, extra: str) -> None:
    out = _import_without(module, [blocked])
    assert out.startswith("ImportError "), out
    assert f'pip install "toolstream[{extra}]"' in out, out


@pytest.mark.parametrize("module", PLAIN)
def test_the_asgi_apps_need_no_server_package(module: str) -> None:
    assert _import_without(module, ["uvicorn", "websockets", "httpx"]) == "imported\n"
