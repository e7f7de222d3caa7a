"""``toolstream tail`` as a user runs it: in a real terminal (a pty, read by the pyte
terminal emulator at 80x24), and as a Unix filter (``--json | head``, to a file,
SIGTERM)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import toolstream as ts
from toolstream.sse import SSEApp

from .servers import Served, free_port, serve

pyte = pytest.importorskip("pyte", reason="pyte (the terminal emulator) is not installed")

TAIL = [sys.executable, "-m", "toolstream", "tail"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    env["PYTHONUNBUFFERED"] = "0"
    return env


class Terminal:
    """A process in a pseudo-terminal of ``columns`` x ``lines``, its screen emulated."""

    def __init__(self, argv: list[str], columns: int = 80, lines: int = 24) -> None:
        self.screen = pyte.Screen(columns, lines)
        self.stream = pyte.ByteStream(self.screen)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        self.master = master
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=_env(), close_fds=True
        )
        os.close(slave)

    def pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # the process exited and the pty closed
                return
            self.stream.feed(data)

    @property
    def text(self) -> list[str]:
        return list(self.screen.display)

    def wait_for(self, condition: Callable[[list[str]], bool], within: float = 15.0) -> None:
        deadline = time.monotonic() + within
        while not condition(self.text):
            if time.monotonic() > deadline:
                shown = "\n".join(self.text)
                raise AssertionError(f"the terminal never showed what was expected:\n{shown}")
            self.pump(0.05)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.process.poll() is None and time.monotonic() < deadline:
            self.pump(0.05)
        code = self.process.wait(timeout=1)
        os.close(self.master)
        return code


@pytest.fixture
def bus() -> ts.EventBus:
    return ts.EventBus()


@pytest.fixture
def server(bus: ts.EventBus) -> Iterator[Served]:
    with serve(SSEApp(bus)) as served:
        yield served


def busy_session(bus: ts.EventBus) -> ts.Tracker:
    """40 finished calls, then 3 running and 2 queued: more than 24 lines hold."""
    tracker = ts.Tracker(bus, "s")
    for i in range(40):
        call = tracker.create("web_search", call_id=f"done{i}")
        call.start({"q": f"query {i}"})
        call.complete({"results": ["a", "b", "c"]})
    for i in range(3):
        call = tracker.create("fetch_page", call_id=f"run{i}")
        call.start({"url": f"https://example.com/{i}"})
        call.progress(0.5, message=f"reading page {i} of the report, section two")
    for i in range(2):
        tracker.create("summarize", call_id=f"wait{i}").queue()
    tracker.flush()
    return tracker


def test_tail_fits_the_terminal_and_keeps_live_calls_in_view(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = busy_session(bus)
    term = Terminal([*TAIL, f"{server.url}/?session=s"])  # the page URL is the bus here
    try:

        def drawn(text: list[str]) -> bool:
            # A frame reaches the pseudo-terminal in pieces under load: wait for the whole.
            return (
                sum("running" in line for line in text) == 3
                and sum("queued" in line for line in text) == 2
                and any("earlier finished (" in line for line in text)
                and any("section two" in line for line in text)
            )

        term.wait_for(drawn)
        text = term.text
        assert text[0].startswith("● connected  toolstream tail")
        # The summary has the width: a progress message of 41 characters shows whole.
        assert any("reading page 0 of the report, section two" in line for line in text)
        # What did not fit is counted on one line, and nothing runs off the screen.
        assert any("earlier finished (" in line and "completed)" in line for line in text)
        assert text[-1].strip() == ""
        # A call that finishes moves down among the finished; the view follows.
        tracker.open_calls()[0].complete({"pages": 1})
        tracker.flush()
        term.wait_for(lambda text: sum("running" in line for line in text) == 2)
    finally:
        assert term.stop() == 0


def test_tail_shows_the_agents_newest_words(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s")
    run = tracker.run("r1").start()
    message = tracker.message()
    message.delta("First I search.\nThen I read the report carefully.\n")
    tracker.create("web_search", call_id="c1").start({"q": "report"})
    term = Terminal([*TAIL, f"{server.url}/?session=s"])
    try:
        term.wait_for(lambda text: any("agent: Then I read the report" in line for line in text))
        message.finish()
        run.finish()
    finally:
        assert term.stop() == 0


def test_tail_shows_that_it_is_reconnecting_and_why() -> None:
    term = Terminal([*TAIL, f"http://127.0.0.1:{free_port()}/events"])
    try:
        term.wait_for(lambda text: "reconnecting in" in text[0] and "refused" in text[0])
    finally:
        assert term.stop() == 0


def test_tail_names_the_event_stream_when_given_the_page() -> None:
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    async def page(request: object) -> HTMLResponse:
        return HTMLResponse("<!doctype html>")

    with serve(Starlette(routes=[Route("/", page)])) as served:
        done = subprocess.run(
            [*TAIL, f"{served.url}/"], capture_output=True, text=True, timeout=30, env=_env()
        )
    assert done.returncode == 1
    assert "is not an event stream" in done.stderr
    assert f"{served.url}/events" in done.stderr
    assert "Traceback" not in done.stderr


def test_tail_json_into_head_exits_quietly(bus: ts.EventBus, server: Served) -> None:
    tracker = busy_session(bus)
    tail = subprocess.Popen(
        [*TAIL, "--json", "--session", "s", server.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    head = subprocess.Popen(["head", "-3"], stdin=tail.stdout, stdout=subprocess.PIPE)
    assert tail.stdout is not None and tail.stderr is not None
    tail.stdout.close()  # head holds the only reading end now
    # Events keep coming: head takes three lines and exits; the next write of tail
    # finds the pipe closed.
    deadline = time.monotonic() + 30
    while tail.poll() is None and time.monotonic() < deadline:
        tracker.create("more").complete(None)
        tracker.flush()
        time.sleep(0.05)
    out, _ = head.communicate(timeout=10)
    assert len(out.decode().splitlines()) == 3
    assert tail.wait(timeout=10) == 0
    errors = tail.stderr.read().decode()
    tail.stderr.close()
    assert "Traceback" not in errors and "aclose()" not in errors, errors


def test_tail_json_to_a_file_is_written_as_it_comes_and_survives_sigterm(
    bus: ts.EventBus, server: Served, tmp_path: Path
) -> None:
    busy_session(bus)
    out = tmp_path / "events.jsonl"
    with out.open("wb") as sink:
        tail = subprocess.Popen(
            [*TAIL, "--json", "--session", "s", f"{server.url}/"],
            stdout=sink,
            stderr=subprocess.PIPE,
            env=_env(),
        )
        deadline = time.monotonic() + 30
        while not out.read_bytes().count(b"\n"):  # the snapshot, before any exit
            assert time.monotonic() < deadline, "nothing was written"
            time.sleep(0.05)
        tail.send_signal(signal.SIGTERM)
        assert tail.wait(timeout=10) == 0
    lines = out.read_text().splitlines()
    first = json.loads(lines[0])
    assert first["type"] == "stream.reset"
    assert tail.stderr is not None
    with tail.stderr:
        assert tail.stderr.read().decode().strip() == "toolstream tail: connected"


def test_tail_shows_a_call_waiting_for_approval_then_its_outcome(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s")
    waiting = tracker.create("send_email", call_id="mail")
    waiting.ready({"to": "team@example.com"})
    approval_id = waiting.await_approval("Sends an email to the team", timeout=600)
    term = Terminal([*TAIL, f"{server.url}/?session=s"])
    try:
        term.wait_for(lambda text: any("awaiting OK" in line for line in text))
        line = next(line for line in term.text if "awaiting OK" in line)
        assert "send_email" in line and line.lstrip().startswith("!")
        assert "needs approval (expires in 10 min" in line or "(expires in 9 min" in line
        assert term.text[0].endswith("— session s") or "— session s " in term.text[0]
        bus.resolve_approval_now("s", approval_id, approved=False, by="alice")
        term.wait_for(lambda text: any("denied" in line for line in text))
        assert any("send_email was denied by alice" in line for line in term.text)
    finally:
        assert term.stop() == 0


def test_tail_indents_a_subagents_calls_under_their_call_and_collapses_them(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s")
    research = tracker.create("research", call_id="c1")
    research.start({"topic": "anyio"})
    sub = research.subagent("researcher").start()
    search = tracker.create("search", call_id="c2", run_id=sub.run_id)
    search.start({"q": "anyio"})
    search.progress(0.5, message="reading results")
    term = Terminal([*TAIL, f"{server.url}/?session=s"])
    try:
        term.wait_for(lambda text: any("↳ search" in line for line in text))
        rows = [line for line in term.text if "research" in line or "search" in line]
        assert rows[0].lstrip().split()[1] == "research"  # the parent first, the child under it
        assert "reading results" in rows[1]
        search.complete(["hit"])
        research.complete("done")  # its sub-agent's calls collapse to one line
        tracker.flush()
        term.wait_for(lambda text: any("researcher: 1 call (1 completed)" in line for line in text))
        assert not any("↳ search" in line for line in term.text)
    finally:
        assert term.stop() == 0
    expanded = Terminal([*TAIL, "--expand", f"{server.url}/?session=s"])
    try:
        expanded.wait_for(lambda text: any("↳ search" in line for line in text))
    finally:
        assert expanded.stop() == 0
