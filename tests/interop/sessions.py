"""Random agent sessions for the interop tests, and how a client would see them."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import toolstream as ts
from tests.conftest import require
from toolstream import dialects
from toolstream._serving import pump_for, subscribe_at
from toolstream.dialects import Cursor, EncodedFrame
from toolstream.dialects._pump import FrameFormat, Pump

Stream = Pump[EncodedFrame]


def open_now(
    bus: ts.EventBus, *, cursor: str | None, dialect: str, run: str | None = None
) -> Stream:
    """What a transport opens for a client at ``cursor`` (an EventBus knows at once where
    a subscription starts: no await needed)."""
    parsed = Cursor.parse(cursor)
    sub = subscribe_at(bus, session="s1", run=run, cursor=parsed)
    return pump_for(
        sub, session="s1", run=run, cursor=parsed, dialect=dialects.get(dialect), fmt=FrameFormat()
    )


HERE = Path(__file__).parent

OPS = (
    "run_start",
    "run_end",
    "create",
    "delta",
    "ready",
    "queue",
    "start",
    "progress",
    "output",
    "partial",
    "complete",
    "fail",
    "cancel",
    "batch_phase",
    "close",
    "join",
    "ask",
    "decide",
    "say",
    "think",
    "said",
    "subagent",
)
Op = tuple[str, int, int]

# Message text, a secret among it (held back by streaming redaction until it is whole).
WORDS = ["Hello ", "wörld.\n", "the key is sk-", "abcdefghijklmnopqrstuvwx1234 ", "done"]
PIECES = ['{"q": ', '"any', 'io", ', '"n": 3', "}", '"cut off by max_tok']


class Session:
    """Plays ops against a real Tracker on a real EventBus."""

    def __init__(self) -> None:
        self.bus = ts.EventBus(replay=100_000)
        self.tracker = ts.Tracker(self.bus, "s1")
        self.slots: dict[int, ts.CallHandle] = {}
        self.runs: list[ts.RunScope] = []
        self.messages: dict[int, ts.MessageHandle] = {}
        # Clients that joined mid-session (no cursor: a reset first), one stream per dialect.
        self.joins: list[dict[str, Stream]] = []
        self.count = 0

    def play(self, ops: list[Op]) -> None:
        for kind, slot, arg in ops:
            self.apply(kind, slot, arg)
        self.tracker.close()

    def apply(self, kind: str, slot: int, arg: int) -> None:
        t = self.tracker
        handle = self.slots.get(slot)
        if kind == "run_start":
            self.runs.append(t.run().start())
        elif kind == "run_end":
            if self.runs:
                outcome = ("completed", "failed", "cancelled", "interrupted")[arg % 4]
                run = self.runs.pop()
                if not run.finished:  # (a sub-agent's run its parent call ended already)
                    run.finish(outcome, error="boom" if outcome == "failed" else None)  # type: ignore[arg-type]
        elif kind == "create":
            run_id = self.runs[-1].run_id if self.runs else None
            self.slots[slot] = t.create(f"tool_{slot}", run_id=run_id, announce=arg % 3 != 0)
        elif kind == "batch_phase":
            self.bus.publish(
                ts.BatchPhase,
                session="s1",
                run_id=self.runs[-1].run_id if self.runs else None,
                batch_id=f"b{arg}",
                phase=("queued", "running", "done")[arg % 3],
                call_ids=tuple(h.call_id for h in self.slots.values()),
                counts={"running": len(self.slots)},
            )
        elif kind == "close":
            t.close()
            self.tracker = ts.Tracker(self.bus, "s1")
            self.slots.clear()
            self.runs.clear()
            self.messages.clear()
        elif kind == "decide":
            pending = [c.approval for c in self.bus.snapshot("s1").calls if c.approval]
            if pending:
                approval = pending[arg % len(pending)]
                self.bus.resolve_approval_now(
                    "s1",
                    approval.approval_id,
                    approved=arg % 3 != 0,
                    by="person",
                    args={"edited": arg} if arg % 3 == 2 else None,
                )
        elif kind in ("say", "think", "said"):
            message = self.messages.get(slot)
            if kind == "said":
                if message is not None and not message.finished:
                    message.finish()
                return
            if message is None or message.finished:
                run_id = self.runs[-1].run_id if self.runs else None
                message = self.messages[slot] = t.message(run_id=run_id)
            text = WORDS[arg % len(WORDS)]
            message.delta(text) if kind == "say" else message.reasoning(text)
        elif kind == "join":
            self.joins.append(
                {name: open_now(self.bus, cursor=None, dialect=name) for name in ("agui", "ai_sdk")}
            )
        elif handle is not None:
            if kind == "subagent":
                # a sub-agent's run under the call: later creates and messages join it
                try:
                    run = handle.subagent(None if arg % 2 else f"agent_{arg}").start()
                except ts.LifecycleError:
                    return  # past max_subagent_depth
                if run.started and run.parent_call_id is not None:
                    self.runs.append(run)
            elif kind == "delta":
                handle.args_delta(PIECES[arg % len(PIECES)])
            elif kind == "ready":
                handle.ready()
            elif kind == "queue":
                handle.queue(batch_id=f"b{arg % 2}", position=arg)
            elif kind == "start":
                if arg % 2:
                    handle.start({"arg": arg})
                else:
                    handle.start()
            elif kind == "progress":
                handle.progress((arg % 10) / 10, message=f"step {arg}")
            elif kind == "output":
                handle.output_delta(f"line {arg}\n")
            elif kind == "partial":
                handle.output_partial({"rows": arg})
            elif kind == "complete":
                handle.complete({"ok": arg})
            elif kind == "fail":
                handle.fail(RuntimeError(f"failure {arg}"))
            elif kind == "cancel":
                handle.cancel(f"reason {arg}")
            elif kind == "ask":
                try:
                    handle.await_approval(f"reason {arg}", timeout=300 if arg % 2 else None)
                except ts.LifecycleError:
                    pass  # not where an approval can be asked

    def events(self) -> list[ts.Event]:
        return self.bus.subscribe(session="s1", after=f"{self.bus.epoch}-0").take_nowait()


def random_ops(rng: random.Random, n: int) -> list[Op]:
    return [(rng.choice(OPS), rng.randrange(5), rng.randrange(20)) for _ in range(n)]


def stream_frames(
    bus: ts.EventBus,
    dialect: str,
    cursor: str | None,
    *,
    closing: bool = True,
    run: str | None = None,
) -> list[EncodedFrame]:
    """Everything a client reading ``dialect`` (of ``run``) from ``cursor`` receives now."""
    return drain(open_now(bus, cursor=cursor, dialect=dialect, run=run), closing=closing)


def drain(stream: Stream, *, closing: bool = True) -> list[EncodedFrame]:
    """Everything a stream opened earlier has delivered by now, and its epilogue."""
    frames = stream.opening()
    frames += stream.encode(stream.subscription.take_nowait())
    if closing:
        frames += stream.closing()
    stream.subscription.close()
    return frames


def full_stream(bus: ts.EventBus, dialect: str) -> list[EncodedFrame]:
    """A client that saw the whole session from its first event."""
    return stream_frames(bus, dialect, f"{bus.epoch}-0")


def wire(frames: list[EncodedFrame]) -> list[Any]:
    """The messages as the Node checks take them."""
    return [f.message.payload if f.message.raw is None else {"$raw": f.message.raw} for f in frames]


# -- the peers' own validators (Node) --------------------------------------------------------


def node_checks_available() -> tuple[bool, str]:
    if shutil.which("node") is None:
        return False, "Node.js is not installed"
    packages = ["ai", "ai6", "@ag-ui/client", "@ai-sdk/react", "@ai-sdk/react3", "esbuild"]
    if not all((HERE / "node_modules" / name).is_dir() for name in packages):
        return False, "the interop packages are not installed (cd tests/interop && npm ci)"
    return True, ""


def run_node_checks(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate streams with the real @ag-ui/client verifier and the ai package."""
    available, reason = node_checks_available()
    require(available, reason)
    done = subprocess.run(
        ["node", str(HERE / "check.mjs")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results
