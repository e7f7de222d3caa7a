"""ChatApp: the endpoints real chat clients drive — AI SDK ``useChat`` and AG-UI's
``HttpAgent`` POST a turn and read that turn's stream as the response."""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Literal
from urllib.parse import unquote

import anyio
import attrs
from anyio.abc import TaskGroup

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    Bus,
    BusClosed,
    BusUnavailable,
    DialectError,
    Event,
    Principal,
    RequestInfo,
    RunSnapshot,
    SlowConsumer,
    Snapshot,
    StreamReset,
    Subscription,
)
from toolstream import _serving as serving
from toolstream.dialects import Encoder, WireMessage
from toolstream.dialects._framing import RunFramedDialect
from toolstream.dialects.agui import AGUI
from toolstream.dialects.ai_sdk import AISDK
from toolstream.sse._app import encode_frame

from ._bodies import BadBody, ChatBody, parse_body

logger = logging.getLogger("toolstream.chat")

__all__ = ["CancelTurn", "ChatApp", "StartTurn", "TurnRequest"]

_PING = b": ping\n\n"
_STREAM_PATH = re.compile(r"/([^/]+)/stream/?$")
_STOP_PATH = re.compile(r"/([^/]+)/stop/?$")


@attrs.frozen(kw_only=True)
class TurnRequest:
    """What ``start_turn`` gets: start the agent on ``session`` as run ``run_id``.

    ``messages`` and ``body`` are the client's own (AI SDK UI messages and its request
    body; AG-UI's ``RunAgentInput`` messages and the whole input); ``principal`` is
    what ``authorize`` returned (``None`` without ``authorize``).
    :meth:`start_soon` runs the agent in this server process: the task outlives the
    response (a client going away never stops it) and ``POST …/<chat id>/stop``
    cancels it.
    """

    session: str
    run_id: str
    messages: list[Any]
    body: dict[str, Any]
    principal: Any = None
    _task_group: TaskGroup | None = attrs.field(default=None, alias="task_group", repr=False)

    @property
    def user_text(self) -> str:
        """The text of the newest user message (AI SDK: its text parts; AG-UI: its
        ``content``), or ``""``."""
        for message in reversed(self.messages):
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = message.get("parts")
            if isinstance(parts, list):
                return "".join(
                    p["text"]
                    for p in parts
                    if isinstance(p, dict)
                    and p.get("type") == "text"
                    and isinstance(p.get("text"), str)
                )
            return ""
        return ""

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``await fn(*args)`` as this turn's agent, in the server process."""
        if self._task_group is None:
            raise RuntimeError("this TurnRequest was not made by a ChatApp request")
        self._task_group.start_soon(fn, *args)


#: ``start_turn(request)``: start the agent (a task via ``request.start_soon``, or a
#: job for a worker process) so that it announces run ``request.run_id``.
StartTurn = Callable[[TurnRequest], Awaitable[None]]
#: ``cancel_turn(session, run_id)``: cancel a turn running elsewhere (a worker
#: process); True when it was found.
CancelTurn = Callable[[str, str], Awaitable[bool]]


@attrs.define
class _Turn:
    """A turn running in this process: its agent's cancel scope once it has one."""

    scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


class ChatApp:
    """An ASGI app serving chat clients: a POST starts (or continues) a turn and the
    response is that run's stream, in the client's own protocol.

    ``dialect="ai_sdk"`` (``useChat`` / ``DefaultChatTransport``):

    - ``POST`` ``{id, messages, trigger, messageId?}`` (or ``{id, message}``): a new
      user message starts a turn (``start_turn``); an assistant message carrying
      approval responses (``addToolApprovalResponse`` then ``sendMessage()``) applies
      them and continues the waiting run — no new turn. The response is the UI message
      stream (header ``x-vercel-ai-ui-message-stream: v1``, ``[DONE]`` at the end).
    - ``GET …/<chat id>/stream``: the chat's active run from its start (``useChat``'s
      ``resume: true``), or 204 when none is active.

    ``dialect="agui"`` (``HttpAgent``): ``POST`` a ``RunAgentInput``; ``resume``
    entries answer the interrupts of a waiting run and continue it, otherwise a turn
    starts as run ``runId``.

    Both: a response ends where the run waits for a person (AI SDK: ``finish``
    with ``finishReason: "tool-calls"``; AG-UI: ``RUN_FINISHED`` with the interrupt
    outcome); a client going away never cancels the turn — ``POST …/<chat id>/stop``
    does (authorized like a decision; in-process turns, or ``cancel_turn``).
    ``authorize`` as the other transports: a principal's ``can_read(session)`` lets it
    chat, ``can_approve(session)`` lets it decide and stop. Bad bodies get 400 with the
    reason, a bus that cannot be reached 503.
    """

    def __init__(
        self,
        bus: Bus,
        start_turn: StartTurn,
        *,
        dialect: Literal["ai_sdk", "agui"] = "ai_sdk",
        authorize: serving.Authorize | None = None,
        cancel_turn: CancelTurn | None = None,
        allowed_origins: Iterable[str] | None = None,
        heartbeat: float = 15.0,
        start_timeout: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        buffer: int = 4096,
    ) -> None:
        if dialect not in ("ai_sdk", "agui"):
            raise ValueError(f"dialect must be 'ai_sdk' or 'agui', not {dialect!r}")
        if not heartbeat > 0 or not start_timeout > 0:
            raise ValueError("heartbeat and start_timeout must be positive seconds")
        self.bus = bus
        self.start_turn = start_turn
        self.dialect = dialect
        self.authorize = authorize
        self.cancel_turn = cancel_turn
        #: Origins allowed to post (None: any).
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.heartbeat = heartbeat
        #: How long a new turn may take to announce its run before the response says so.
        self.start_timeout = start_timeout
        self.max_body_bytes = max_body_bytes
        self.buffer = buffer
        self._turns: dict[tuple[str, str], _Turn] = {}
        self._streams = serving.OpenStreams()

    @property
    def active_turns(self) -> int:
        """Turns running in this process (started with ``TurnRequest.start_soon``)."""
        return len(self._turns)

    def shutdown(self) -> None:
        """End every open response now and refuse new requests (503); turns running in
        this process are cancelled. Safe from any thread."""
        self._streams.shutdown()

    # -- ASGI ---------------------------------------------------------------------------

    async def __call__(
        self, scope: serving.Scope, receive: serving.Receive, send: serving.Send
    ) -> None:
        if await serving.http_only(scope, receive, send, self.shutdown, "ChatApp"):
            return
        method = scope["method"]
        request = serving.request_info(scope)
        if await serving.origin_refused(request, self.allowed_origins, send, code="forbidden"):
            return
        if self._streams.closing:
            await serving.respond(send, 503, "the server is shutting down", code="unavailable")
            return
        path = request.path
        if method == "GET":
            found = _STREAM_PATH.search(path) if self.dialect == "ai_sdk" else None
            if found is None:
                await serving.respond(send, 404, "GET <chat path>/<chat id>/stream resumes a chat")
                return
            await self._resume(request, found.group(1), receive, send)
            return
        if method != "POST":
            await serving.respond(
                send, 405, "only POST (and GET …/stream) are allowed", code="invalid"
            )
            return
        stop = _STOP_PATH.search(path)
        if stop is not None:
            await self._stop(request, stop.group(1), receive, send)
            return
        await self._post(request, receive, send)

    # -- POST: a turn, or the continuation of a waiting run -------------------------------

    async def _post(
        self, request: RequestInfo, receive: serving.Receive, send: serving.Send
    ) -> None:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            await serving.respond(
                send, 415, "a chat request is sent as application/json", code="invalid"
            )
            return
        raw = await serving.read_body(receive, self.max_body_bytes)
        if raw is None:
            await serving.respond(
                send, 413, f"the body is over {self.max_body_bytes} bytes", code="invalid"
            )
            return
        try:
            chat = parse_body(self.dialect, json.loads(raw))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            reason = str(exc) if isinstance(exc, BadBody) else "the body is not JSON"
            await serving.respond(send, 400, reason, code="invalid")
            return
        principal = await self._admit(request, chat.session, send)
        if principal is None:
            return
        if chat.decisions and not await serving.may_approve(principal, chat.session):
            message = f"not allowed to decide in chat {chat.session!r}"
            await serving.respond(send, 403, message, code="forbidden")
            return
        try:
            if chat.continuation:
                await self._continue(chat, principal, receive, send)
            else:
                await self._start(chat, principal, receive, send)
        except (BusUnavailable, BusClosed) as exc:
            await serving.unavailable(send, exc)

    async def _start(
        self,
        chat: ChatBody,
        principal: Principal | bool,
        receive: serving.Receive,
        send: serving.Send,
    ) -> None:
        """A new turn: subscribe to its run, start it, stream it."""
        run_id = chat.run_id or f"run_{secrets.token_hex(8)}"
        key = (chat.session, run_id)
        if key in self._turns:
            await serving.respond(send, 409, f"run {run_id!r} is already running", code="conflict")
            return
        turn = self._turns[key] = _Turn()  # claimed before any await: one POST per run

        def forget() -> None:
            if self._turns.get(key) is turn:
                del self._turns[key]

        try:
            sub = await serving.prepared(
                self.bus.subscribe(session=chat.session, run=run_id, buffer=self.buffer)
            )
        except BaseException:
            forget()
            raise
        started = anyio.Event()
        async with anyio.create_task_group() as outer:
            # The agent's tasks live in their own group: a client going away ends only
            # the response; POST …/stop cancels only the agent. The turn is forgotten
            # when they end.
            agents: TaskGroup = await outer.start(_host_agents, started, forget, self._streams)
            turn.scope = agents.cancel_scope
            turn_request = TurnRequest(
                session=chat.session,
                run_id=run_id,
                messages=chat.messages,
                body=chat.body,
                principal=None if principal is True else principal,
                task_group=agents,
            )
            try:
                await self.start_turn(turn_request)
            except Exception as exc:
                logger.exception("start_turn failed for chat %r", chat.session)
                await sub.aclose()
                await serving.respond(send, 500, f"the turn could not start: {exc}", code="error")
                return
            finally:
                started.set()  # the agent's group now ends with its tasks
            await self._stream(sub, self._dialect(), receive, send, started=False)

    async def _continue(
        self,
        chat: ChatBody,
        principal: Principal | bool,
        receive: serving.Receive,
        send: serving.Send,
    ) -> None:
        """Decisions on a waiting run: apply them, stream what follows them."""
        run_id = await self._waiting_run(chat)
        if run_id is None:
            # No run of the chat is open (its run finished "interrupted", the agent
            # stopped to wait): the decisions are applied and a turn resumes the agent.
            refused = await self._apply(chat, principal)
            if refused is not None:
                await serving.send_json(send, refused.status, refused.body)
                return
            await self._start(attrs.evolve(chat, decisions=[]), principal, receive, send)
            return
        sub = self.bus.subscribe(
            session=chat.session, run=run_id, snapshot=True, buffer=self.buffer
        )
        try:
            await sub.prepare()
            first = await sub.batches().__anext__()
            dialect = self._dialect()
            # The client has the run up to the wait: take on its state, end at the wait.
            pending: set[str] = set()
            head = list(first)
            while head and isinstance(head[0], StreamReset):
                reset = head.pop(0)
                dialect.encode(reset)
                _track(pending, reset)
            dialect.pause()
            if isinstance(dialect, AGUI):
                dialect.continuation_id = chat.run_id
            refused = await self._apply(chat, principal)
            if refused is not None:
                await sub.aclose()
                await serving.send_json(send, refused.status, refused.body)
                return
        except BaseException:
            await sub.aclose()
            raise
        await self._stream(sub, dialect, receive, send, started=True, pending=pending, head=head)

    async def _snapshot(self, session: str) -> Snapshot:
        """The session's state: read without blocking the loop on a broker bus."""
        fetch = getattr(self.bus, "fetch_snapshot", None)
        if fetch is not None:
            snapshot: Snapshot = await fetch(session)
            return snapshot
        return self.bus.snapshot(session)

    async def _waiting_run(self, chat: ChatBody) -> str | None:
        """The open run the decisions continue: the run of a call asking for one of
        them; else the run the client's message is (AI SDK: its id is the run's); else
        the chat's newest open run."""
        snapshot = await self._snapshot(chat.session)
        open_runs = {r.run_id for r in snapshot.open_runs}
        wanted = {d.approval_id for d in chat.decisions}
        for call in snapshot.calls:
            pending = call.approval
            if pending is not None and pending.approval_id in wanted and call.run_id in open_runs:
                return call.run_id
        last = chat.messages[-1] if chat.messages else None
        message_id = last.get("id") if isinstance(last, dict) else None
        if isinstance(message_id, str) and message_id in open_runs:
            return message_id
        newest = _newest(snapshot)
        return None if newest is None else newest.run_id

    async def _apply(self, chat: ChatBody, principal: Principal | bool) -> serving.Decided | None:
        """Apply the decisions; the first refusal (as the decision endpoints answer it),
        or None. A decision already made the same way (a client retrying) is no error."""
        for decision in chat.decisions:
            body = {"approval_id": decision.approval_id, "approved": decision.approved}
            if decision.reason is not None:
                body["reason"] = decision.reason
            if decision.args is not None:
                body["args"] = decision.args
            outcome = await serving.decide(self.bus, principal, chat.session, body)
            if outcome.status == 409:
                won = outcome.body.get("resolution", {})
                if won.get("approved") == decision.approved:
                    continue
            if outcome.status == 503:
                raise BusUnavailable(outcome.body["error"])
            if outcome.status != 200:
                return outcome
        return None

    # -- GET …/<chat id>/stream: resume ------------------------------------------------------

    async def _resume(
        self, request: RequestInfo, session: str, receive: serving.Receive, send: serving.Send
    ) -> None:
        admitted = await self._chat_of(request, session, send)
        if admitted is None:
            return
        session, _ = admitted
        try:
            run = _newest(await self._snapshot(session))
            if run is None:
                await send({"type": "http.response.start", "status": 204, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            if run.first_event_id is not None:
                sub = self.bus.resume(
                    session=session,
                    run=run.run_id,
                    after=run.first_event_id,
                    at=True,
                    buffer=self.buffer,
                )
            else:
                sub = self.bus.subscribe(
                    session=session, run=run.run_id, snapshot=True, buffer=self.buffer
                )
            await serving.prepared(sub)
        except (BusUnavailable, BusClosed) as exc:
            await serving.unavailable(send, exc)
            return
        await self._stream(sub, self._dialect(), receive, send, started=True)

    # -- POST …/<chat id>/stop --------------------------------------------------------------

    async def _stop(
        self, request: RequestInfo, session: str, receive: serving.Receive, send: serving.Send
    ) -> None:
        await serving.read_body(receive, self.max_body_bytes)
        admitted = await self._chat_of(request, session, send)
        if admitted is None:
            return
        session, principal = admitted
        if not await serving.may_approve(principal, session):
            await serving.respond(
                send, 403, f"not allowed to stop chat {session!r}", code="forbidden"
            )
            return
        try:
            open_runs = [r.run_id for r in (await self._snapshot(session)).open_runs]
        except (BusUnavailable, BusClosed) as exc:
            await serving.unavailable(send, exc)
            return
        stopped: list[str] = []
        for key, turn in list(self._turns.items()):
            if key[0] == session:
                turn.cancel()
                stopped.append(key[1])
        if self.cancel_turn is not None:
            for run_id in open_runs:
                if run_id not in stopped and await self.cancel_turn(session, run_id):
                    stopped.append(run_id)
        if not stopped:
            await serving.respond(
                send, 404, f"no turn of chat {session!r} runs here", code="not_found"
            )
            return
        await serving.send_json(send, 200, {"session": session, "stopped": stopped})

    # -- the response stream ------------------------------------------------------------------

    def _dialect(self) -> RunFramedDialect:
        return AGUI() if self.dialect == "agui" else AISDK()

    async def _admit(
        self, request: RequestInfo, session: str, send: serving.Send
    ) -> Principal | bool | None:
        refusal = f"not allowed in chat {session!r}"
        return await serving.admit(self.authorize, request, session, send, refusal)

    async def _chat_of(
        self, request: RequestInfo, raw: str, send: serving.Send
    ) -> tuple[str, Principal | bool] | None:
        """The chat id of a path and the principal that may read it; None once
        refused (400 / 401 / 403 sent)."""
        session = unquote(raw)
        if not serving.valid_session(session):
            await serving.respond(send, 400, "the chat id must be valid text", code="invalid")
            return None
        principal = await self._admit(request, session, send)
        return None if principal is None else (session, principal)

    async def _stream(
        self,
        sub: Subscription[Any],
        dialect: RunFramedDialect,
        receive: serving.Receive,
        send: serving.Send,
        *,
        started: bool,
        pending: set[str] | None = None,
        head: list[Event] | None = None,
    ) -> None:
        """Send the run's stream (``head`` first: events read already) until it ends, or
        until it waits for a person."""
        encoder = Encoder(dialect)
        waiting: set[str] = set() if pending is None else pending
        try:
            headers = serving.stream_headers(dialect)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await serving.event_stream(
                self._streams,
                receive,
                send,
                lambda send: self._pump(sub, encoder, send, waiting, started, head or []),
            )
        except OSError:  # the client went away before the stream began
            pass
        finally:
            sub.close()

    async def _pump(
        self,
        sub: Subscription[Any],
        encoder: Encoder,
        send: serving.Send,
        waiting: set[str],
        started: bool,
        head: list[Event],
    ) -> None:
        dialect = encoder.dialect
        assert isinstance(dialect, RunFramedDialect)
        deadline = None if started else time.monotonic() + self.start_timeout
        batches = sub.batches()
        try:
            while True:
                wait = self.heartbeat
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                batch: list[Event] | None = None
                if head:
                    batch, head = head, []
                else:
                    with anyio.move_on_after(wait):
                        try:
                            batch = await batches.__anext__()
                        except StopAsyncIteration:
                            break
                if batch is None:
                    if deadline is not None and time.monotonic() >= deadline:
                        text = "the agent did not start its run in time"
                        await _write(send, _frames(encoder, dialect.fail(text, "NoStart")))
                        return
                    await _write(send, [_PING])
                    continue
                out: list[bytes] = []
                for event in batch:
                    out += [encode_frame(f) for f in encoder.encode(event)]
                    _track(waiting, event)
                if out:
                    deadline = None
                if waiting:
                    out += _frames(encoder, dialect.pause())
                    await _write(send, out)
                    return
                if out:
                    await _write(send, out)
        except SlowConsumer as exc:
            logger.info("cutting a slow chat client: %s", exc)
            return
        except (BusUnavailable, BusClosed) as exc:
            text = f"the event bus is unavailable: {exc}"
            await _write(send, _frames(encoder, dialect.fail(text, "Unavailable")))
            return
        except DialectError:
            logger.exception("a dialect could not encode an event; ending the response")
            return
        await _write(send, _frames(encoder, dialect.close()))


def _newest(snapshot: Snapshot) -> RunSnapshot | None:
    """The chat's newest open run (the active turn), if any."""
    return max(snapshot.open_runs, key=lambda r: r.started_ts or 0.0, default=None)


def _track(waiting: set[str], event: Event) -> None:
    """Keep the set of approvals waiting for a decision up to date."""
    if isinstance(event, ApprovalRequested):
        waiting.add(event.approval_id)
    elif isinstance(event, ApprovalResolved):
        waiting.discard(event.approval_id)
    elif isinstance(event, StreamReset):
        waiting.clear()
        waiting.update(c.approval.approval_id for c in event.snapshot.calls if c.approval)


def _frames(encoder: Encoder, messages: list[WireMessage]) -> list[bytes]:
    """Messages that end the response, as SSE bytes."""
    return [encode_frame(f) for f in encoder.trailing(messages)]


async def _write(send: serving.Send, chunks: list[bytes]) -> None:
    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})


async def _host_agents(
    started: anyio.Event,
    done: Callable[[], None],
    streams: serving.OpenStreams,
    *,
    task_status: anyio.abc.TaskStatus[TaskGroup],
) -> None:
    """Hold a task group for a turn's agent: open until ``start_turn`` returned, then
    until the agent's tasks end; ``done()`` after. The server exiting (or the app's
    ``shutdown()``) cancels them: a turn never holds a server open."""
    try:
        with anyio.CancelScope() as scope, streams.serving(scope):
            async with anyio.create_task_group() as watching:
                watching.start_soon(serving.watch_server_exit, scope)
                async with anyio.create_task_group() as agents:
                    task_status.started(agents)
                    await started.wait()
                watching.cancel_scope.cancel()  # the agent is done: stop watching
    finally:
        done()
