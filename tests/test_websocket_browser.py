"""A real browser's WebSocket against WebSocketApp."""

from __future__ import annotations

import toolstream as ts
from toolstream.websocket import WebSocketApp

from .browser import browser_page, with_page
from .servers import serve

PAGE = b"""<!doctype html>
<html><body><script>
  window.received = [];
  window.closeCode = null;
  const ws = new WebSocket(`ws://${location.host}/ws`);
  ws.onopen = () => {
    ws.send(JSON.stringify({op: "subscribe", session: "s1"}));
    ws.send(JSON.stringify({op: "subscribe", session: "s2", dialect: "agui"}));
  };
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.op === "ping") { ws.send(JSON.stringify({op: "pong"})); return; }
    window.received.push(msg);
  };
  ws.onclose = (e) => { window.closeCode = e.code; };
</script></body></html>
"""


def test_browser_websocket_subscribes_and_receives() -> None:
    bus = ts.EventBus()
    with (
        browser_page() as page,
        serve(
            with_page(PAGE, WebSocketApp(bus, ping_interval=0.5)), ws="websockets-sansio"
        ) as served,
    ):
        page.goto(f"{served.url}/")
        page.wait_for_function(
            "window.received.filter(m => m.op === 'subscribed').length === 2", timeout=15000
        )
        ts.Tracker(bus, "s1").create("native_tool", call_id="n1").complete({"ok": True})
        with ts.Tracker(bus, "s2").run(run_id="r1"):
            ts.Tracker(bus, "s2").create("agui_tool", call_id="a1").complete("done")
        page.wait_for_function(
            "window.received.some(m => m.data && m.data.type === 'RUN_FINISHED')", timeout=15000
        )
        page.wait_for_timeout(1500)  # three ping intervals: the page answers, the socket stays
        received = page.evaluate("window.received")
        assert page.evaluate("window.closeCode") is None, "the socket stayed open"
    native = [
        m["data"]["type"] for m in received if m.get("session") == "s1" and m["op"] == "event"
    ]
    assert native == ["stream.reset", "tool.created", "tool.started", "tool.completed"]
    agui = [m["data"]["type"] for m in received if m.get("session") == "s2" and m["op"] == "event"]
    assert agui == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "RUN_FINISHED",
    ]
    bus.close()
