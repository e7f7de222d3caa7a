"""The demo's A2A server (``/a2a``): the A2A project's client runs a whole demo turn as a
task. (Apart from tests/test_demo.py, whose sync Playwright browser keeps an event loop
on the main thread that an async test cannot run beside.)"""

from __future__ import annotations

import httpx

import toolstream as ts
from tests.servers import serve
from toolstream.demo import build_app


async def test_the_a2a_server_runs_the_demo_agent_for_the_a2a_client() -> None:
    """``/a2a``: the card is there (``GET /a2a`` too), and the A2A project's client runs
    a whole turn of the demo agent as a task, approving what it asks."""
    from tests.test_a2a import HEADERS, calls, connect, decision, final, said, stream, task_of

    bus = ts.EventBus()
    try:
        with serve(build_app(bus, speed=8.0)) as served:
            async with httpx.AsyncClient(timeout=60, headers=HEADERS) as http:
                card = (await http.get(f"{served.url}/a2a")).json()
                assert card["supportedInterfaces"][0]["url"] == f"{served.url}/a2a/"
                assert card["capabilities"]["streaming"] is True
                client = await connect(f"{served.url}/a2a", http)
                got = await stream(client, said("Research tides"))
                task = task_of(got)
                while final(got) == "TASK_STATE_INPUT_REQUIRED":
                    approval = calls(got)[-1]["approval_id"]
                    got += await stream(client, decision(task, approval, True))
    finally:
        bus.close()
    assert final(got) == "TASK_STATE_COMPLETED"
    states = {(d["tool"], d["state"]) for d in calls(got)}
    assert ("web_search", "completed") in states
    assert {("save_notes", "approved"), ("send_email", "completed")} <= states
    research = next(d["call_id"] for d in calls(got) if d["tool"] == "research")
    notes = [d for d in calls(got) if d["tool"] == "save_notes"]
    assert all(d["parent_call_id"] == research for d in notes)  # the researcher's call
