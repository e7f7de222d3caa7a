"""Sub-agents in every dialect, checked with the peers' own validators: a call whose tool
is an agent, whose sub-agent says something, makes calls (one failing, one running its
own sub-agent) and asks a person; the parent cancelled in the middle of a sub-run; a
client cut and resumed in the middle of one; approvals inside a sub-agent decided
through the decision endpoints."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from tests.servers import eventually, serve
from toolstream.sse import SSEApp

from .sessions import Session, full_stream, run_node_checks, stream_frames, wire
from .test_dialects import check_agui_tags, check_generated, obj, strict_agui


def researched(session: Session) -> None:
    """r1: c1 (research) runs sub-agent s1, which talks, calls c2 (search, running
    sub-agent s2 whose c3 reads a page), c4 (fetch, fails); c1 completes."""
    t = session.tracker
    with t.run(run_id="r1"):
        research = t.create("research", call_id="c1")
        research.ready({"topic": "anyio"})
        with research.subagent("researcher", run_id="s1"):
            with t.message(message_id="m1") as message:
                message.delta("Searching first.")
            search = t.create("search", call_id="c2")
            search.args_delta('{"q": "any')
            search.args_delta('io"}')
            search.start()
            with search.subagent(run_id="s2"):
                t.create("read", call_id="c3").complete("the page")
            search.complete(["hit"])
            fetch = t.create("fetch", call_id="c4")
            fetch.start({"url": "https://example.com"})
            fetch.fail(RuntimeError("404"))
        research.complete("anyio runs on asyncio and trio")


def agui_messages(frames: Any) -> list[dict[str, Any]]:
    messages = wire(frames)
    for m in messages:
        strict_agui(m)
    check_agui_tags(messages)
    return messages


def test_the_tree_in_every_dialect() -> None:
    session = Session()
    researched(session)
    bus = session.bus
    # AG-UI: no RUN_STARTED for a sub-run; SUBAGENT_STARTED / FINISHED around it, its
    # events tagged
    agui = agui_messages(full_stream(bus, "agui"))
    assert [m["runId"] for m in agui if m["type"] == "RUN_STARTED"] == ["r1"]
    started = [m for m in agui if m["type"] == "SUBAGENT_STARTED"]
    assert started == [
        {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": "s1",
            "name": "researcher",
            "parentToolCallId": "c1",
        },
        {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": "s2",
            "name": "search",
            "parentToolCallId": "c2",
            "parentSubagentRunId": "s1",
        },
    ]
    finished = [m for m in agui if m["type"] == "SUBAGENT_FINISHED"]
    assert [(m["subagentRunId"], m["outcome"]) for m in finished] == [
        ("s2", {"type": "success"}),
        ("s1", {"type": "success"}),
    ]
    tagged = {m.get("toolCallId") or m.get("messageId"): m.get("subagentRunId") for m in agui}
    assert (tagged["c1"], tagged["m1"], tagged["c2"], tagged["c3"], tagged["c4"]) == (
        None,
        "s1",
        "s1",
        "s2",
        "s1",
    )
    order = [(m["type"], m.get("toolCallId") or m.get("subagentRunId")) for m in agui]
    assert order.index(("SUBAGENT_FINISHED", "s1")) < order.index(("TOOL_CALL_RESULT", "c1"))
    # native: the fields as they are
    native = [obj(f) for f in full_stream(bus, "native")]
    run = next(p for p in native if p["type"] == "run.started" and p["run_id"] == "s2")
    assert (run["parent_call_id"], run["parent_run_id"], run["agent"]) == ("c2", "s1", "search")
    # hermes: the sub-agent's calls say where they are
    hermes = {p["toolCallId"]: p for p in map(obj, full_stream(bus, "hermes"))}
    assert (hermes["c3"]["parentToolCallId"], hermes["c3"]["subagentRunId"]) == ("c2", "s2")
    assert "parentToolCallId" not in hermes["c1"]
    # the peers' validators: @ag-ui/core's EventSchemas and the verifier; ai's schema and
    # readUIMessageStream
    results = run_node_checks(
        [
            {"name": "agui", "dialect": "agui", "messages": agui},
            {"name": "ai", "dialect": "ai_sdk", "messages": wire(full_stream(bus, "ai_sdk"))},
            {
                "name": "s1",
                "dialect": "ai_sdk",
                "messages": wire(stream_frames(bus, "ai_sdk", f"{bus.epoch}-0", run="s1")),
            },
        ]
    )
    assert all(r["ok"] for r in results), results
    by_name = {r["name"]: r for r in results}
    [message] = by_name["ai"]["messages"]
    [part] = message["full"]["parts"][1:]  # after the step-start
    assert (part["type"], part["state"], part.get("preliminary")) == (
        "tool-research",
        "output-available",
        None,
    )
    output = part["output"]
    assert output["metadata"] == {
        "subagents": [{"runId": "s1", "agent": "researcher"}],
        "result": "anyio runs on asyncio and trio",
    }
    # the sub-agent's message is what readUIMessageStream builds of its own stream
    [own] = by_name["s1"]["messages"]
    assert output["parts"] == own["full"]["parts"]
    assert output["id"] == own["full"]["id"] == "s1"
    kinds = [(p["type"], p.get("state")) for p in output["parts"]]
    assert kinds == [
        ("step-start", None),
        ("text", "done"),
        ("tool-search", "output-available"),
        ("tool-fetch", "output-error"),
    ]
    nested = output["parts"][2]["output"]  # a sub-agent's sub-agent, recursively
    assert nested["metadata"]["result"] == ["hit"]
    assert [(p["type"], p.get("output")) for p in nested["parts"]] == [
        ("step-start", None),
        ("tool-read", "the page"),
    ]


def test_preliminary_outputs_grow_with_the_subagent() -> None:
    session = Session()
    researched(session)
    chunks = [c for c in wire(full_stream(session.bus, "ai_sdk")) if "type" in c]
    outputs = [
        c for c in chunks if c["type"] == "tool-output-available" and c["toolCallId"] == "c1"
    ]
    assert all(c.get("preliminary") for c in outputs[:-1]) and "preliminary" not in outputs[-1]
    sizes = [len(c["output"]["parts"]) for c in outputs]
    assert sizes == sorted(sizes) and sizes[0] == 1  # the step-start, at its start
    # the nested call's progress is no part of it: a transient data part, as it is
    assert not [c for c in chunks if c["type"].startswith("data-") and "transient" not in c]


@pytest.mark.anyio
async def test_cancelling_the_parent_in_the_middle_of_a_subrun() -> None:
    session = Session()
    reached = anyio.Event()

    async def agent() -> None:
        t = session.tracker
        async with (
            t.run(run_id="r1"),
            t.call("research", {"topic": "x"}, call_id="c1") as research,
            research.subagent("researcher", run_id="s1"),
        ):
            with t.message(message_id="m1") as message:
                message.delta("Reading…")
                async with t.call("read", {"page": 1}, call_id="c2"):
                    reached.set()
                    await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent)
        await reached.wait()
        tg.cancel_scope.cancel()
    session.tracker.close()
    bus = session.bus
    agui = agui_messages(full_stream(bus, "agui"))
    order = [(m["type"], m.get("toolCallId") or m.get("subagentRunId")) for m in agui]
    error = order.index(("SUBAGENT_ERROR", "s1"))
    assert order.index(("TOOL_CALL_RESULT", "c2")) < error < order.index(("TOOL_CALL_RESULT", "c1"))
    assert agui[error]["code"] == "cancelled"
    hermes = [obj(f) for f in full_stream(bus, "hermes")]
    assert [(p["toolCallId"], p["status"]) for p in hermes if p["status"] != "running"] == [
        ("c2", "cancelled"),
        ("c1", "cancelled"),
    ]
    chunks = wire(full_stream(bus, "ai_sdk"))
    results = run_node_checks(
        [
            {"name": "agui", "dialect": "agui", "messages": agui},
            {"name": "ai", "dialect": "ai_sdk", "messages": chunks},
        ]
    )
    assert all(r["ok"] for r in results), results
    [message] = results[1]["messages"]
    [part] = message["parts"]
    assert (part["state"], part["errorText"]) == ("output-error", "Cancelled: cancelled")


def test_a_client_cut_in_the_middle_of_a_subrun_resumes_exactly() -> None:
    """Cut after any frame (between the messages of one event included) while sub-runs
    are open, resumed by that frame's id: exactly the rest, in every dialect, on the
    session's stream and on each run's (a turn's stream follows its sub-agents)."""
    session = Session()
    t = session.tracker
    run = t.run(run_id="r1").start()
    research = t.create("research", call_id="c1", run_id="r1")
    research.start({"topic": "x"})
    sub = research.subagent("researcher", run_id="s1").start()
    t.message(message_id="m1", run_id="s1").delta("Looking ")
    inner = t.create("search", call_id="c2", run_id="s1")
    inner.args_delta('{"q": 1}')
    inner.start()
    deeper = inner.subagent(run_id="s2").start()
    t.create("read", call_id="c3", run_id="s2").start()
    check_generated(session)  # open sub-runs at the end
    inner.progress(0.5, message="half")
    deeper.finish()
    inner.complete(["hit"])
    sub.finish()
    research.complete("done")
    run.finish()
    session.tracker.close()
    check_generated(session)
    # the turn's own stream (what a chat client reads) carries its sub-agents
    turn = [
        obj(f) for f in stream_frames(session.bus, "native", f"{session.bus.epoch}-0", run="r1")
    ]
    assert {p["run_id"] for p in turn} == {"r1", "s1", "s2"}


@pytest.mark.anyio
async def test_an_approval_inside_a_subagent_decided_through_the_decision_endpoint() -> None:
    """The AI SDK has no approvals inside sub-agents: the nested call shows
    approval-requested inside the sub-agent's message and is decided with a POST on the
    SSE endpoint; AG-UI interrupts (the interrupt tagged with the sub-agent, the
    sub-agent suspended) and goes on in a continuation run that starts it again."""
    session = Session()
    bus, t = session.bus, session.tracker
    with serve(SSEApp(bus)) as served:

        async def person() -> None:
            await eventually(lambda: any(c.approval for c in bus.snapshot("s1").calls))
            pending = next(c.approval for c in bus.snapshot("s1").calls if c.approval)
            async with httpx.AsyncClient() as http:
                response = await http.post(
                    f"{served.url}/?session=s1",
                    json={"approval_id": pending.approval_id, "approved": True},
                )
            assert response.status_code == 200, response.text

        async with anyio.create_task_group() as tg:
            tg.start_soon(person)
            async with (
                t.run(run_id="r1"),
                t.call("assistant", {"task": "mail"}, call_id="c1") as assistant,
                assistant.subagent("mailer", run_id="s1"),
                t.call("send_email", {"to": "bob"}, approval="Sends mail", call_id="c2") as mail,
            ):
                mail.complete({"sent": True})
    agui = agui_messages(full_stream(bus, "agui"))
    interrupt = next(m for m in agui if m["type"] == "RUN_FINISHED")["outcome"]
    assert interrupt["type"] == "interrupt"
    assert interrupt["interrupts"][0]["subagentRunId"] == "s1"
    suspended = next(m for m in agui if m["type"] == "SUBAGENT_FINISHED")
    assert suspended["outcome"] == {
        "type": "suspended",
        "interruptIds": [interrupt["interrupts"][0]["id"]],
    }
    assert [m["runId"] for m in agui if m["type"] == "RUN_STARTED"] == ["r1", "r1.1"]
    assert [m["subagentRunId"] for m in agui if m["type"] == "SUBAGENT_STARTED"] == ["s1", "s1"]
    chunks = wire(full_stream(bus, "ai_sdk"))
    assert "tool-approval-request" not in [c.get("type") for c in chunks]
    asked = [
        c["output"]["parts"][-1]
        for c in chunks
        if c.get("type") == "tool-output-available" and c.get("preliminary")
    ]
    assert "approval-requested" in [p.get("state") for p in asked]
    results = run_node_checks(
        [
            {"name": "agui", "dialect": "agui", "messages": agui},
            {"name": "ai", "dialect": "ai_sdk", "messages": chunks},
        ]
    )
    assert all(r["ok"] for r in results), results
    [message] = results[1]["messages"]
    nested = message["full"]["parts"][-1]["output"]["parts"][-1]
    assert (nested["type"], nested["state"], nested["output"]) == (
        "tool-send_email",
        "output-available",
        {"sent": True},
    )
    assert nested["approval"]["id"] == interrupt["interrupts"][0]["id"]
    assert json.dumps(nested)  # JSON all the way down
