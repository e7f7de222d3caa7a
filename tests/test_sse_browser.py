"""A real browser's EventSource against SSEApp: reconnects on its own, resumes exactly,
and takes a reset after a restart with a new bus. Plus Ctrl-C on a real uvicorn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

import toolstream as ts
from toolstream.sse import SSEApp

from .browser import browser_page, wait_for, with_page
from .servers import free_port, serve

PAGE = b"""<!doctype html>
<html><body>
<pre id="log"></pre>
<script>
  window.received = [];
  const source = new EventSource("/events?session=s1");
  const types = %s;
  for (const type of types) {
    source.addEventListener(type, (e) => {
      window.received.push({type: e.type, id: e.lastEventId, data: JSON.parse(e.data)});
    });
  }
  source.onopen = () => { window.opens = (window.opens || 0) + 1; };
</script>
</body></html>
""" % json.dumps([cls.type for cls in ts.EVENT_TYPES]).encode()


def test_event_source_resumes_across_a_server_restart_and_resets_on_a_new_bus() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s1")
    port = free_port()
    events = SSEApp(bus, retry_ms=200, heartbeat=1.0)
    with browser_page() as page:
        with serve(with_page(PAGE, events), port=port) as served:
            page.goto(f"{served.url}/")
            wait_for(page, "window.received.length >= 1")  # the reset
            for i in range(5):
                tracker.create("before", call_id=f"a{i}").complete(i)
            wait_for(page, "window.received.length >= 11")
        # The server is down: the browser keeps retrying while the agent goes on.
        for i in range(5):
            tracker.create("while_down", call_id=f"b{i}").complete(i)
        with serve(with_page(PAGE, events), port=port):
            wait_for(page, "window.received.length >= 21")
            tracker.create("after", call_id="c0").complete(0)
            wait_for(page, "window.received.length >= 23")
            received = page.evaluate("window.received")
        published = [
            e.id for e in bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()
        ]
        got = [r["id"] for r in received if r["type"] != "stream.reset"]
        assert got == published, "every event exactly once, in order, across the restart"
        assert page.evaluate("window.opens") >= 2, "the browser reconnected on its own"
        # A restart with a new bus: the browser's cursor is stale; it gets a reset, not
        # events of another epoch.
        new_bus = ts.EventBus()
        ts.Tracker(new_bus, "s1").create("fresh", call_id="d0").start()
        before = len(received)
        with serve(with_page(PAGE, SSEApp(new_bus, retry_ms=200)), port=port):
            wait_for(page, f"window.received.length > {before}")
            latest = page.evaluate("window.received")[before:]
        assert latest[0]["type"] == "stream.reset"
        assert [c["call_id"] for c in latest[0]["data"]["snapshot"]["calls"]] == ["d0"]
        new_bus.close()
    bus.close()


APP_MODULE = """
import toolstream as ts
from toolstream.sse import SSEApp

bus = ts.EventBus()
app = SSEApp(bus, heartbeat=30.0)
"""


def test_ctrl_c_on_uvicorn_with_open_streams_exits_promptly(tmp_path: Path) -> None:
    (tmp_path / "sse_app.py").write_text(APP_MODULE)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "sse_app:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("uvicorn did not start") from None
                time.sleep(0.05)
        clients = [
            httpx.stream("GET", f"http://127.0.0.1:{port}/?session=s{i}", timeout=None)
            for i in range(3)
        ]
        responses = [c.__enter__() for c in clients]
        readers = [r.iter_bytes() for r in responses]  # kept alive: the streams stay open
        for reader in readers:
            assert next(reader)
        start = time.monotonic()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)
        took = time.monotonic() - start
        for c in clients:
            try:
                c.__exit__(None, None, None)
            except httpx.HTTPError:
                pass
        assert took < 3, f"Ctrl-C took {took:.1f} s with open streams"
        assert server.returncode == 0, server.stdout.read().decode() if server.stdout else ""
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if server.stdout:
            server.stdout.close()
