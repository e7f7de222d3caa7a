"""ChatApp: the endpoints real chat clients drive — AI SDK ``useChat``, AG-UI's
``HttpAgent`` and LangGraph's ``useStream`` POST a turn and read that turn's stream as
the response."""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Iterable
from typing import Any, Literal
from urllib.parse import quote, unquote_to_bytes

import attrs
from anyio.abc import TaskGroup

from toolstream import (
    MAX_ID_BYTES,
    ApprovalResolved,
    Bus,
    BusClosed,
    BusUnavailable,
    Principal,
    RequestInfo,
    RunFinished,
    RunSnapshot,
    RunStarted,
    Snapshot,
    Subscription,
)
from toolstream import _serving as serving
from toolstream.dialects import Encoder
from toolstream.dialects._framing import RunFramedDialect
from toolstream.dialects.agui import AGUI
from toolstream.dialects.ai_sdk import AISDK
from toolstream.sse._app import encode_frame

from ._agents import Agents, CancelTurn, StartTurn, TurnRequest
from ._bodies import BadBody, ChatBody, parse_body
from ._langgraph import LangGraph, publish_user_messages, thread_history
from ._pump import Pump, frames

logger = logging.getLogger("toolstream.chat")

__all__ = ["CancelTurn", "ChatApp", "StartTurn", "TurnRequest"]

# Matched on the path as the client sent it, still percent-encoded (_path_as_sent): the
# chat id is its own segment, decoded once, so an encoded "/" or "%" stays in the id.
_STREAM_PATH = re.compile(r"/([^/]+)/stream/?$")
_STOP_PATH = re.compile(r"/([^/]+)/stop/?$")
_DECIDE_PATH = re.compile(r"/([^/]+)/decide/?$")


def _path_as_sent(scope: serving.Scope) -> str:
    """The request's path percent-encoded as sent (the ASGI ``raw_path``; a server that
    gives none: the decoded path encoded again, where an encoded "/" is lost already)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        return raw.partition(b"?")[0].decode("latin-1")
    return quote(str(scope.get("path", "")), safe="/")


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

    ``dialect="langgraph"`` (``useStream`` with ``FetchStreamTransport``): ``POST``
    ``{input, command?, config: {configurable: {thread_id}}}``; ``input`` starts a
    turn (the user's messages are kept on the bus, and ``TurnRequest.messages`` holds
    the thread's earlier words from it), ``command.resume`` ``{"<interrupt id>":
    {approved, reason?, args?}}`` continues the waiting run. The response is
    LangGraph's stream: ``metadata``, ``values`` (the thread's whole state),
    ``messages``, ``tools``, ``error``.

    All: a response ends where the run waits for a person (AI SDK: ``finish``
    with ``finishReason: "tool-calls"``; AG-UI: ``RUN_FINISHED`` with the interrupt
    outcome; LangGraph: ``values`` with ``__interrupt__``); a client going away never
    cancels the turn — ``POST …/<chat id>/stop`` does (authorized like a decision;
    in-process turns, or ``cancel_turn``).

    Sub-agents stream in both (AG-UI ``SUBAGENT_*`` events; AI SDK: the sub-agent's
    message as its call's output). The AI SDK has no approvals inside sub-agents: a call
    of a sub-agent that waits for a person shows ``approval-requested`` inside that
    message, the response does not end there, and the decision comes through
    ``POST …/<chat id>/decide`` ``{"approval_id", "approved", "reason"?, "args"?}``
    (answered as ``SSEApp``'s decision ``POST``), or any other decision endpoint.
    ``authorize`` as the other transports: a principal's ``can_read(session)`` lets it
    chat, ``can_approve(session)`` lets it decide and stop. Bad bodies get 400 with the
    reason, a bus that cannot be reached 503.
    """

    def __init__(
        self,
        bus: Bus,
        start_turn: StartTurn,
        *,
        dialect: Literal["ai_sdk", "agui", "langgraph"] = "ai_sdk",
        authorize: serving.Authorize | None = None,
        cancel_turn: CancelTurn | None = None,
        allowed_origins: Iterable[str] | None = None,
        heartbeat: float = 15.0,
        start_timeout: float = 30.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        buffer: int = 4096,
    ) -> None:
        if dialect not in ("ai_sdk", "agui", "langgraph"):
            raise ValueError(f"dialect must be 'ai_sdk', 'agui' or 'langgraph', not {dialect!r}")
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
        self._streams = serving.OpenStreams()
        self._agents = Agents(bus, self._streams, logger, "chat %r run %r")

    @property
    def active_turns(self) -> int:
        """Turns running in this process (started with ``TurnRequest.start_soon``)."""
        return len(self._agents.running)

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
        path = _path_as_sent(scope)
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
        decide = _DECIDE_PATH.search(path)
        if decide is not None:
            await self._decide(request, decide.group(1), receive, send)
            return
        await self._post(request, receive, send)

    # -- POST: a turn, or the continuation of a waiting run -------------------------------

    async def _post(
        self, request: RequestInfo, receive: serving.Receive, send: serving.Send
    ) -> None:
        raw = await self._json_body(request, "a chat request", receive, send)
        if raw is None:
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
        *,
        continues: str | None = None,
    ) -> None:
        """A new turn: subscribe to its run, start it, stream it. ``continues``: the
        client's assistant message this turn continues (an agent that stopped its run
        to wait for a person is resumed by a new run)."""
        run_id = chat.run_id or f"run_{secrets.token_hex(8)}"
        agents = self._agents
        running = agents.claim(chat.session, run_id)
        if running is None:
            await serving.respond(send, 409, f"run {run_id!r} is already running", code="conflict")
            return
        dialect: RunFramedDialect | None = None
        try:
            if self.dialect == "langgraph":
                dialect, earlier = await self._turn_dialect(chat, run_id)
                chat = attrs.evolve(chat, messages=earlier + chat.messages)
            sub = await serving.prepared(
                self.bus.subscribe(session=chat.session, run=run_id, buffer=self.buffer)
            )
        except BaseException:
            agents.forget(chat.session, run_id, running)
            raise

        async def start(group: TaskGroup) -> None:
            request = TurnRequest(
                session=chat.session,
                run_id=run_id,
                messages=chat.messages,
                body=chat.body,
                principal=None if principal is True else principal,
                bus=self.bus,
                task_group=group,
                on_error=agents.failed,
            )
            await self.start_turn(request)

        async with agents.started(chat.session, run_id, running, start, "start_turn"):
            if dialect is None:
                dialect = self._dialect()
            if continues is not None and isinstance(dialect, AISDK):
                dialect.continue_message(continues)
            await self._stream(sub, dialect, receive, send, started=False)

    async def _continue(
        self,
        chat: ChatBody,
        principal: Principal | bool,
        receive: serving.Receive,
        send: serving.Send,
    ) -> None:
        """Decisions on a waiting run: apply them, then stream what follows them in the
        run they continue — replayed from the run's start and sent from the point where
        the client's response paused, so nothing is lost or sent twice (a retried POST
        gets the same again; the agent never runs twice)."""
        outcome = await self._apply(chat, principal)
        if outcome.refusal is not None:
            await serving.send_json(send, outcome.refusal.status, outcome.refusal.body)
            return
        snapshot = await self._snapshot(chat.session)
        runs = {r.run_id: r for r in snapshot.runs}
        # an approval of a sub-agent's call continues the turn its sub-agent is part of
        turn_of = {r.approval_id: _turn(runs, r.run_id) for r in outcome.resolutions}
        decided = [r for r in outcome.resolutions if turn_of[r.approval_id] is not None]
        target = max(
            (runs[str(turn_of[r.approval_id])] for r in decided),
            key=lambda r: r.started_ts or 0.0,
            default=None,
        )
        continues = _client_message_id(chat) if self.dialect == "ai_sdk" else None
        if target is not None and target.state == "interrupted":
            # The agent stopped its run to wait: its continuation is a new run (the
            # first that started after it, once start_turn made it).
            since = target.started_ts or 0.0
            later = [r for r in snapshot.runs if (r.started_ts or 0.0) > since]
            resumed = min(later, key=lambda r: r.started_ts or 0.0, default=None)
            if resumed is None and outcome.fresh:
                await self._start(
                    attrs.evolve(chat, decisions=[]), principal, receive, send, continues=continues
                )
                return
            if resumed is not None:
                await self._replay(
                    chat, resumed, set(), receive, send, continues=continues, history=snapshot
                )
                return
            target = None
        if target is None:
            if outcome.fresh and not decided:
                # Decisions on approvals of no run this chat still knows: resume the agent.
                await self._start(
                    attrs.evolve(chat, decisions=[]), principal, receive, send, continues=continues
                )
                return
            await self._empty(send, continues, chat, snapshot)  # a retry after everything ended
            return
        prime = {r.approval_id for r in decided if turn_of[r.approval_id] == target.run_id}
        await self._replay(chat, target, prime, receive, send, continues=None, history=snapshot)

    async def _replay(
        self,
        chat: ChatBody,
        run: RunSnapshot,
        prime: set[str],
        receive: serving.Receive,
        send: serving.Send,
        *,
        continues: str | None,
        history: Snapshot,
    ) -> None:
        """Stream ``run`` for a continuation: replayed from its start; with ``prime``,
        the part up to (and with) the requests of those approvals is what the client
        has already, and only what follows it is sent. ``history``: the chat's state
        the continuation read (what a LangGraph response starts from)."""
        sub = await self._whole_run(chat.session, run)
        dialect = self._dialect_for(chat.session, run.run_id, history)
        if isinstance(dialect, AGUI):
            dialect.continuation_id = chat.run_id
        if continues is not None and isinstance(dialect, AISDK):
            dialect.continue_message(continues)
        await self._stream(
            sub,
            dialect,
            receive,
            send,
            started=True,
            prime=prime if prime else None,
            decided=frozenset(d.approval_id for d in chat.decisions),
        )

    async def _empty(
        self, send: serving.Send, continues: str | None, chat: ChatBody, history: Snapshot
    ) -> None:
        """A well-formed, empty response: a retried continuation whose run is gone."""
        name = chat.run_id or f"run_{secrets.token_hex(8)}"
        dialect = self._dialect_for(chat.session, name, history)
        if continues is not None and isinstance(dialect, AISDK):
            dialect.continue_message(continues)
        encoder = Encoder(dialect)
        now = time.time()
        started = RunStarted(id="0-0", ts=now, session=chat.session, run_id=name)
        finished = RunFinished(id="0-0", ts=now, session=chat.session, run_id=name)
        body = [encode_frame(f) for e in (started, finished) for f in encoder.encode(e)]
        body += frames(encoder, dialect.close())
        headers = serving.stream_headers(dialect)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"".join(body)})

    async def _whole_run(self, session: str, run: RunSnapshot) -> Subscription[Any]:
        """A subscription to ``run`` from its ``run.started`` (from its snapshot when the
        bus no longer holds its start), then live, to its end."""
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
        return await serving.prepared(sub)

    async def _snapshot(self, session: str) -> Snapshot:
        return await serving.snapshot_of(self.bus, session)

    async def _apply(self, chat: ChatBody, principal: Principal | bool) -> _Applied:
        """Apply the decisions: the resolutions that stand for them, whether any was
        applied by this request, or the first refusal (as the decision endpoints answer
        it). A decision already made the same way (a client retrying) is no error."""
        applied = _Applied()
        for decision in chat.decisions:
            body = {"approval_id": decision.approval_id, "approved": decision.approved}
            if decision.reason is not None:
                body["reason"] = decision.reason
            if decision.args is not None:
                body["args"] = decision.args
            outcome = await serving.decide(self.bus, principal, chat.session, body)
            if outcome.status == 409:
                won = outcome.body.get("resolution", {})
                if won.get("approved") == decision.approved and outcome.resolution is not None:
                    applied.resolutions.append(outcome.resolution)
                    continue
            if outcome.status == 503:
                raise BusUnavailable(outcome.body["error"])
            if outcome.status != 200:
                applied.refusal = outcome
                return applied
            applied.fresh = True
            if outcome.resolution is not None:
                applied.resolutions.append(outcome.resolution)
        return applied

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
            sub = await self._whole_run(session, run)
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
            open_runs = [
                r.run_id
                for r in (await self._snapshot(session)).open_runs
                if r.parent_call_id is None  # a sub-agent's run ends with its call
            ]
        except (BusUnavailable, BusClosed) as exc:
            await serving.unavailable(send, exc)
            return
        stopped = self._agents.cancel(session)
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

    async def _json_body(
        self, request: RequestInfo, what: str, receive: serving.Receive, send: serving.Send
    ) -> bytes | None:
        """The request's JSON body (at most ``max_body_bytes``), or None once a 415 or
        413 was sent."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            await serving.respond(send, 415, f"{what} is sent as application/json", code="invalid")
            return None
        raw = await serving.read_body(receive, self.max_body_bytes)
        if raw is None:
            await serving.respond(
                send, 413, f"the body is over {self.max_body_bytes} bytes", code="invalid"
            )
        return raw

    # -- POST …/<chat id>/decide ------------------------------------------------------------

    async def _decide(
        self, request: RequestInfo, session: str, receive: serving.Receive, send: serving.Send
    ) -> None:
        """A decision on one of the chat's approvals (one no client protocol can carry:
        a call of a sub-agent, for the AI SDK), answered as the decision endpoints do."""
        raw = await self._json_body(request, "a decision", receive, send)
        if raw is None:
            return
        admitted = await self._chat_of(request, session, send)
        if admitted is None:
            return
        session, principal = admitted
        try:
            decision = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            await serving.respond(send, 400, "the body is not JSON", code="invalid")
            return
        outcome = await serving.decide(self.bus, principal, session, decision)
        await serving.send_json(send, outcome.status, outcome.body)

    # -- the response stream ------------------------------------------------------------------

    def _dialect(self) -> RunFramedDialect:
        return AGUI() if self.dialect == "agui" else AISDK()

    def _dialect_for(self, session: str, run_id: str, history: Snapshot) -> RunFramedDialect:
        """The dialect of a response of run ``run_id`` (LangGraph's holds the thread's
        state: ``history``, the chat's as the request read it)."""
        if self.dialect != "langgraph":
            return self._dialect()
        return LangGraph(thread=session, run_id=run_id, history=history)

    async def _turn_dialect(
        self, chat: ChatBody, run_id: str
    ) -> tuple[LangGraph, list[dict[str, Any]]]:
        """A LangGraph turn: the user's new messages published on the chat (where any
        gateway process finds them); the dialect of its response, which shows them with
        the thread's earlier state, and the thread's earlier words (the client sends
        only its new message)."""
        history = await self._snapshot(chat.session)
        said = publish_user_messages(self.bus, chat.session, chat.messages, history)
        dialect = LangGraph(thread=chat.session, run_id=run_id, history=history)
        dialect.seen(said)
        return dialect, thread_history(history)

    async def _admit(
        self, request: RequestInfo, session: str, send: serving.Send
    ) -> Principal | bool | None:
        refusal = f"not allowed in chat {session!r}"
        return await serving.admit(self.authorize, request, session, send, refusal)

    async def _chat_of(
        self, request: RequestInfo, raw: str, send: serving.Send
    ) -> tuple[str, Principal | bool] | None:
        """The chat id of a path segment as sent (decoded once: what the client's
        ``encodeURIComponent`` made) and the principal that may read it; None once
        refused (400 / 401 / 403 sent)."""
        try:
            session = unquote_to_bytes(raw.encode("latin-1")).decode("utf-8")
        except UnicodeError:
            session = ""
        if not serving.valid_session(session):
            await serving.respond(
                send,
                400,
                f"the chat id must be valid text of at most {MAX_ID_BYTES} bytes",
                code="invalid",
            )
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
        prime: set[str] | None = None,
        decided: frozenset[str] = frozenset(),
    ) -> None:
        """Send the run's stream until it ends, or until it waits for a person.

        ``prime``: the approvals whose requests end what the client already has (the
        response it continues paused there): what comes up to the last of them only
        brings the dialect up to date, and the response starts after it. ``decided``:
        approvals the client has answered (never waited for again here)."""
        encoder = Encoder(dialect)
        pump = Pump(sub, encoder, started, prime, decided, self.heartbeat, self.start_timeout)
        try:
            headers = serving.stream_headers(dialect)
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await serving.event_stream(self._streams, receive, send, pump.run)
        except OSError:  # the client went away before the stream began
            pass
        finally:
            sub.close()


@attrs.define
class _Applied:
    """What a continuation's decisions came to."""

    #: The resolutions that stand for the decisions (this request's or earlier ones').
    resolutions: list[ApprovalResolved] = attrs.field(factory=list)
    #: True when this request applied at least one decision (not a retry).
    fresh: bool = False
    #: The first refusal (sent as the decision endpoints send it), if any.
    refusal: serving.Decided | None = None


def _client_message_id(chat: ChatBody) -> str | None:
    """The id of the assistant message an AI SDK continuation continues."""
    last = chat.messages[-1] if chat.messages else None
    message_id = last.get("id") if isinstance(last, dict) else None
    return message_id if isinstance(message_id, str) and message_id else None


def _turn(runs: dict[str, RunSnapshot], run_id: str | None) -> str | None:
    """The turn (a run of its own) ``run_id`` is part of: itself, or, for a sub-agent's
    run, the run its parent calls' runs go up to; None for a run the chat no longer
    knows."""
    seen: set[str] = set()
    while run_id is not None and run_id in runs and run_id not in seen:
        run = runs[run_id]
        if run.parent_call_id is None:
            return run_id
        seen.add(run_id)
        run_id = run.parent_run_id
    return None


def _newest(snapshot: Snapshot) -> RunSnapshot | None:
    """The chat's newest open run (the active turn; a sub-agent's run is part of its
    turn), if any."""
    turns = [r for r in snapshot.open_runs if r.parent_call_id is None]
    return max(turns, key=lambda r: r.started_ts or 0.0, default=None)
