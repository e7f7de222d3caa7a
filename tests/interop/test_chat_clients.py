"""The peers' own chat clients against ChatApp, under a real uvicorn on 127.0.0.1: the
``ai`` package's ``AbstractChat`` + ``DefaultChatTransport`` (what ``useChat`` runs) and
``@ag-ui/client``'s ``HttpAgent`` (with its event verifier)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

import toolstream as ts
from tests.chat_agents import STORY, chat_app
from tests.conftest import require
from tests.servers import Served, serve

from .sessions import HERE, node_checks_available


def run_client(script: str, url: str, scenario: str) -> dict[str, Any]:
    available, reason = node_checks_available()
    require(available, reason)
    done = subprocess.run(
        ["node", str(HERE / script), url, scenario],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["ok"], result
    return result


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def ai_sdk_server(bus: ts.EventBus) -> Iterator[Served]:
    with serve(chat_app(bus)) as served:
        yield served


@pytest.fixture
def agui_server(bus: ts.EventBus) -> Iterator[Served]:
    with serve(chat_app(bus, dialect="agui")) as served:
        yield served


def parts(message: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(p["type"], p["state"]) for p in message["parts"]]


def test_use_chat_approves_a_call_then_denies_one_in_a_second_turn(
    ai_sdk_server: Served, bus: ts.EventBus
) -> None:
    result = run_client("chat_ai.mjs", ai_sdk_server.url + "/api/chat", "approve-then-deny")
    user1, first, user2, second = result["messages"]
    assert (user1["role"], user2["role"]) == ("user", "user")
    # One assistant message per turn, spanning the approval: text, the call, text.
    assert parts(first) == [
        ("reasoning", "done"),
        ("text", "done"),
        ("tool-send_email", "output-available"),
        ("text", "done"),
    ]
    assert first["text"] == "I will email the team.\nSent."
    assert first["parts"][2]["output"] == {"sent": True}
    assert first["parts"][2]["approval"]["approved"] is True
    assert parts(second)[2] == ("tool-send_email", "output-denied")
    assert second["text"] == "I will email the team.\nNot sent."
    assert second["parts"][2]["approval"] == {
        "id": second["parts"][2]["approval"]["id"],
        "requestReason": "Sends an email",
        "approved": False,
        "reason": "not now",
    }
    # The message ids are the runs'; the steps saw the same message before and after.
    steps = result["steps"]
    assert steps[0]["messageId"] == steps[1]["messageId"] == first["id"]
    assert steps[2]["messageId"] == steps[3]["messageId"] == second["id"]
    assert result["errors"] == []
    (chat,) = [s for s in bus.sessions() if s.startswith("chat-")]
    snapshot = bus.snapshot(chat)
    assert [c.state for c in snapshot.calls] == [ts.CallState.COMPLETED, ts.CallState.DENIED]
    assert not snapshot.open_runs


def test_use_chat_resumes_a_cut_turn_with_nothing_lost_or_doubled(ai_sdk_server: Served) -> None:
    result = run_client("chat_ai.mjs", ai_sdk_server.url + "/api/chat", "resume")
    cut, resumed = result["steps"]
    assert 0 < len(cut["text"]) < len("".join(STORY))  # cut mid-answer
    _, answer = result["messages"]
    assert parts(answer) == [
        ("text", "done"),
        ("tool-lookup", "output-available"),
        ("text", "done"),
    ]
    assert answer["parts"][0]["text"] == "".join(STORY)
    assert answer["text"] == "".join(STORY) + "The end."
    assert resumed["text"] == answer["text"]


@pytest.mark.parametrize("scenario", ["approve", "deny"])
def test_http_agent_is_interrupted_for_approval_then_resumed(
    agui_server: Served, scenario: str
) -> None:
    result = run_client("chat_agui.mjs", agui_server.url + "/agent", scenario)
    first, second = result["runs"]
    assert first["outcome"] == "interrupt"
    assert first["events"][0] == "RUN_STARTED" and first["events"][-1] == "RUN_FINISHED"
    assert "TEXT_MESSAGE_CONTENT" in first["events"]
    assert "REASONING_MESSAGE_CONTENT" in first["events"]
    assert [i["toolCallId"] for i in first["interrupts"]] != [None]
    # The continuation does not send the call again; it goes on from the decision.
    assert "TOOL_CALL_START" not in second["events"]
    assert second["events"][0] == "RUN_STARTED" and second["events"][-1] == "RUN_FINISHED"
    assert second["outcome"] == "success" and second["interrupts"] == []
    said = [
        m["content"] for m in result["messages"] if m["role"] == "assistant" and m.get("content")
    ]
    assert said == ["I will email the team.\n", "Sent." if scenario == "approve" else "Not sent."]
    results = [m for m in result["messages"] if m["role"] == "tool"]
    assert len(results) == 1
    if scenario == "approve":
        assert json.loads(results[0]["content"]) == {"sent": True}
    else:
        assert results[0]["content"].startswith("Denied")
