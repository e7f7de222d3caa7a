"""A2AApp: an A2A v1.0 server (JSON-RPC binding) over any toolstream bus — a task is a
run, ``contextId`` its session, and ``SubscribeToTask`` with ``Last-Event-ID`` replays
exactly what a client missed, from any gateway process."""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from typing import Any

import anyio
import attrs
from anyio.abc import TaskGroup

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    Bus,
    BusClosed,
    BusUnavailable,
    Principal,
    RequestInfo,
    RunFinished,
    RunSnapshot,
    SlowConsumer,
    Snapshot,
    StreamReset,
    Subscription,
)
from toolstream import _serving as serving
from toolstream._core.jsonenc import dumpb
from toolstream.chat._agents import Agents, TurnRequest
from toolstream.dialects._pump import beats

from . import _wire as wire
from ._wire import RpcError

logger = logging.getLogger("toolstream.a2a")

__all__ = ["A2AApp", "CancelTask", "StartTask", "TaskRequest"]

_CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
_STREAMING = frozenset({"SendStreamingMessage", "message/stream"})
_METHODS = {
    "SendStreamingMessage": "send",
    "message/stream": "send",
    "SendMessage": "send",
    "message/send": "send",
    "GetTask": "get",
    "tasks/get": "get",
    "CancelTask": "cancel",
    "tasks/cancel": "cancel",
    "SubscribeToTask": "subscribe",
    "tasks/resubscribe": "subscribe",
}
_UNSUPPORTED = frozenset(
    {
        "ListTasks",
        "GetExtendedAgentCard",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)
_PING = b": ping\n\n"


@attrs.frozen(kw_only=True)
class TaskRequest(TurnRequest):
    """What ``start_task`` gets: start the agent on ``session`` (the ``contextId``) as
    run ``run_id`` (the ``taskId``).

    ``message`` is the client's A2A ``Message`` (proto-JSON) and ``body`` the request's
    ``params``; ``principal`` is what ``authorize`` returned (``None`` without one).
    It is a :class:`~toolstream.chat.TurnRequest` whose ``messages`` is the user's
    message as a chat message (``{"role": "user", "content": <its text parts>}``), so a
    framework's ``chat_agent(...)`` is a ``start_task`` as it is: ``A2AApp(bus,
    chat_agent(graph), card=…)``. :meth:`start_soon` runs the agent in this server
    process: the task outlives the response (a client going away never stops it) and
    ``CancelTask`` cancels it; an agent that raises ends the task
    ``TASK_STATE_FAILED``.
    """

    message: dict[str, Any]


#: ``start_task(request)``: start the agent (a task via ``request.start_soon``, or a job
#: for a worker process) so that it announces run ``request.run_id``.
StartTask = Callable[[TaskRequest], Awaitable[None]]
#: ``cancel_task(session, run_id)``: cancel a task running elsewhere (a worker process);
#: True when it was found.
CancelTask = Callable[[str, str], Awaitable[bool]]


def _served_card(card: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(card, Mapping) or not isinstance(card.get("name"), str):
        raise ValueError("card must be an agent card (a mapping with a 'name')")
    served = copy.deepcopy(dict(card))
    served.setdefault("description", "")
    served.setdefault("version", "1.0.0")
    served.setdefault("defaultInputModes", ["text/plain", "application/json"])
    served.setdefault("defaultOutputModes", ["text/plain", "application/json"])
    served.setdefault("skills", [])
    capabilities = dict(served.get("capabilities") or {})
    capabilities["streaming"] = True
    extensions = list(capabilities.get("extensions") or [])
    if not any(isinstance(e, Mapping) and e.get("uri") == wire.EXTENSION_URI for e in extensions):
        extensions.append(
            {
                "uri": wire.EXTENSION_URI,
                "description": "toolstream's tool lifecycle: each call's states as data "
                "parts of status updates, resume by event id",
            }
        )
    capabilities["extensions"] = extensions
    served["capabilities"] = capabilities
    json.dumps(served)  # a card that is not JSON fails here, not at the first request
    return served


class A2AApp:
    """An ASGI app serving A2A v1.0 clients (JSON-RPC binding) from a toolstream bus.

    - ``GET /.well-known/agent-card.json``: ``card`` with ``capabilities.streaming`` and
      the tool-lifecycle extension (``urn:toolstream:a2a:tool-lifecycle:v1``) added;
      without ``supportedInterfaces``, the app's own URL as the JSON-RPC interface.
    - ``POST /`` (JSON-RPC 2.0): ``SendStreamingMessage`` and ``SendMessage`` start a
      task (``start_task``; the task is a run, ``contextId`` its session) or answer
      the approvals it waits for (a message on the same ``taskId`` with data parts
      ``{approval_id, approved, reason?, args?}``); ``GetTask``; ``CancelTask``;
      ``SubscribeToTask``, which with the HTTP header ``Last-Event-ID`` sends exactly
      the events after that one (each update's ``metadata.event_id``). The v0.3 method
      names are aliases.

    Each tool call event is a ``TASK_STATE_WORKING`` status update whose message holds
    ``{"data": {call_id, tool, state, …}}``; an approval is ``TASK_STATE_INPUT_REQUIRED``
    and ends the response; the agent's text is artifact chunks. Errors are JSON-RPC
    errors with HTTP 200; ``authorize`` as on the other transports (``can_read`` to
    send and read, ``can_approve`` to decide and cancel).
    """

    def __init__(
        self,
        bus: Bus,
        start_task: StartTask,
        *,
        card: Mapping[str, Any],
        authorize: serving.Authorize | None = None,
        cancel_task: CancelTask | None = None,
        allowed_origins: Iterable[str] | None = None,
        heartbeat: float = 15.0,
        start_timeout: float = 30.0,
        cancel_timeout: float = 10.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        buffer: int = 4096,
    ) -> None:
        if not heartbeat > 0 or not start_timeout > 0 or not cancel_timeout > 0:
            raise ValueError("heartbeat, start_timeout and cancel_timeout must be positive")
        self.bus = bus
        self.start_task = start_task
        self.card = _served_card(card)
        self.authorize = authorize
        self.cancel_task = cancel_task
        #: Origins allowed to post (None: any).
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.heartbeat = heartbeat
        #: How long a new task may take to announce its run.
        self.start_timeout = start_timeout
        #: How long ``CancelTask`` waits for the task's end before it answers.
        self.cancel_timeout = cancel_timeout
        self.max_body_bytes = max_body_bytes
        self.buffer = buffer
        self._streams = serving.OpenStreams()
        self._agents = Agents(bus, self._streams, logger, "context %r task %r")

    @property
    def active_tasks(self) -> int:
        """Tasks running in this process (started with ``TaskRequest.start_soon``)."""
        return len(self._agents.running)

    def shutdown(self) -> None:
        """End every open response now and refuse new requests; tasks running in this
        process are cancelled. Safe from any thread."""
        self._streams.shutdown()

    # -- ASGI ---------------------------------------------------------------------------

    async def __call__(
        self, scope: serving.Scope, receive: serving.Receive, send: serving.Send
    ) -> None:
        if await serving.http_only(scope, receive, send, self.shutdown, "A2AApp"):
            return
        request = serving.request_info(scope)
        if await serving.origin_refused(request, self.allowed_origins, send, code="forbidden"):
            return
        if self._streams.closing:
            await serving.respond(send, 503, "the server is shutting down", code="unavailable")
            return
        path = str(scope.get("path", ""))
        if scope["method"] == "GET":
            if path.endswith(_CARD_PATHS):
                await serving.send_json(send, 200, self._card_for(request, scope, path))
                return
            await serving.respond(send, 404, "GET /.well-known/agent-card.json is the card")
            return
        if scope["method"] != "POST":
            await serving.respond(send, 405, "A2A requests are POSTed (JSON-RPC 2.0)")
            return
        await self._rpc(request, receive, send)

    def _card_for(self, request: RequestInfo, scope: serving.Scope, path: str) -> dict[str, Any]:
        if self.card.get("supportedInterfaces"):
            return self.card
        host = request.headers.get("host", "localhost")
        root = path[: -len(next(p for p in _CARD_PATHS if path.endswith(p)))]
        url = f"{scope.get('scheme', 'http')}://{host}{root}/"
        interface = {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        return {**self.card, "supportedInterfaces": [interface]}

    async def _rpc(
        self, request: RequestInfo, receive: serving.Receive, send: serving.Send
    ) -> None:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            await serving.respond(send, 415, "JSON-RPC is sent as application/json")
            return
        raw = await serving.read_body(receive, self.max_body_bytes)
        if raw is None:
            await serving.respond(send, 413, f"the body is over {self.max_body_bytes} bytes")
            return
        request_id: object = None
        try:
            try:
                envelope = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise RpcError(wire.PARSE_ERROR, "the body is not JSON") from None
            method, request_id, params = _envelope(envelope)
            version = request.headers.get("a2a-version", "").strip()
            if version and version != "1.0" and not version.startswith("1.0."):
                raise RpcError(
                    wire.VERSION_NOT_SUPPORTED, f"this server speaks A2A 1.0, not {version}"
                )
            action = _METHODS.get(method)
            if action is None:
                if method in _UNSUPPORTED:
                    raise RpcError(wire.UNSUPPORTED, f"{method} is not supported")
                raise RpcError(wire.METHOD_NOT_FOUND, f"unknown method {method!r}")
            if action == "send":
                await self._send(request, method, request_id, params, send, receive)
            elif action == "get":
                await self._get(request, request_id, params, send)
            elif action == "cancel":
                await self._cancel(request, request_id, params, send)
            else:
                await self._subscribe(request, request_id, params, send, receive)
        except RpcError as exc:
            await serving.send_json(send, 200, exc.body(request_id))
        except (BusUnavailable, BusClosed) as exc:
            await serving.send_json(send, 200, _unavailable(exc).body(request_id))

    async def _admit(
        self, request: RequestInfo, session: str, send: serving.Send, *, decide: bool = False
    ) -> Principal | bool | None:
        principal = await serving.admit(
            self.authorize, request, session, send, f"not allowed in context {session!r}"
        )
        if principal is not None and decide and not await serving.may_approve(principal, session):
            await serving.respond(
                send, 403, f"not allowed to decide in context {session!r}", code="forbidden"
            )
            return None
        return principal

    async def _snapshot(self, session: str) -> Snapshot:
        return await serving.snapshot_of(self.bus, session)

    # -- SendMessage / SendStreamingMessage ---------------------------------------------

    async def _send(
        self,
        request: RequestInfo,
        method: str,
        request_id: object,
        params: Any,
        send: serving.Send,
        receive: serving.Receive,
    ) -> None:
        sent = wire.parse_message(params)
        principal = await self._admit(request, sent.session, send, decide=bool(sent.decisions))
        if principal is None:
            return
        streaming = method in _STREAMING
        if sent.task is None:
            await self._start(sent, params, principal, request_id, streaming, send, receive)
            return
        snapshot = await self._snapshot(sent.session)
        run = next((r for r in snapshot.runs if r.run_id == sent.task), None)
        if run is None:
            raise RpcError(wire.TASK_NOT_FOUND, f"task {sent.task!r} was not found")
        if not sent.decisions:
            if run.state != "running":
                raise RpcError(wire.UNSUPPORTED, f"task {sent.task!r} has ended ({run.state})")
            raise RpcError(
                wire.UNSUPPORTED,
                "a task takes no further messages but decisions on its approvals "
                "(data parts {approval_id, approved})",
            )
        answered = await self._decide(sent, principal, snapshot)
        sub = await self._from_start(sent.session, sent.task, run.first_event_id)
        encoder = wire.Encoder(sent.task, sent.session)
        pump = _Pump(self, sub, encoder, request_id, started=True, skip=answered)
        await self._respond(pump, streaming, send, receive)

    async def _decide(
        self, sent: wire.SentMessage, principal: Principal | bool, snapshot: Snapshot
    ) -> set[str]:
        """Apply the message's decisions; the approvals they answer (a decision already
        made the same way — a client retrying — is no error). An approval of another
        task is refused before anything is applied."""
        task = sent.task
        assert task is not None
        runs = wire.task_runs(snapshot, task)
        pending = {c.approval.approval_id: c for c in snapshot.calls if c.approval is not None}
        for decision in sent.decisions:
            call = pending.get(decision.approval_id)
            if call is not None and call.run_id not in runs:
                raise RpcError(
                    wire.INVALID_PARAMS,
                    f"approval {decision.approval_id!r} is not of task {task!r}",
                )
        answered: set[str] = set()
        for decision in sent.decisions:
            body: dict[str, Any] = {
                "approval_id": decision.approval_id,
                "approved": decision.approved,
            }
            if decision.reason is not None:
                body["reason"] = decision.reason
            if decision.args is not None:
                body["args"] = decision.args
            outcome = await serving.decide(self.bus, principal, sent.session, body)
            won = outcome.body.get("resolution", {}) if outcome.status == 409 else {}
            if outcome.status == 200 or won.get("approved") == decision.approved:
                resolution = outcome.resolution
                if resolution is not None and resolution.run_id not in runs:
                    raise RpcError(
                        wire.INVALID_PARAMS,
                        f"approval {decision.approval_id!r} is not of task {task!r}",
                    )
                answered.add(decision.approval_id)
                continue
            if outcome.status == 503:
                raise BusUnavailable(str(outcome.body.get("error")))
            code = wire.TASK_NOT_FOUND if outcome.status == 404 else wire.INVALID_PARAMS
            raise RpcError(code, str(outcome.body.get("error", "the decision was refused")))
        return answered

    async def _start(
        self,
        sent: wire.SentMessage,
        params: dict[str, Any],
        principal: Principal | bool,
        request_id: object,
        streaming: bool,
        send: serving.Send,
        receive: serving.Receive,
    ) -> None:
        run_id = wire.task_id(sent.session)
        agents = self._agents
        running = agents.claim(sent.session, run_id)
        assert running is not None  # a new id
        try:
            sub = await serving.prepared(
                self.bus.subscribe(session=sent.session, run=run_id, buffer=self.buffer)
            )
        except BaseException:
            agents.forget(sent.session, run_id, running)
            raise
        encoder = wire.Encoder(run_id, sent.session)

        async def start(group: TaskGroup) -> None:
            request = TaskRequest(
                session=sent.session,
                run_id=run_id,
                messages=[{"role": "user", "content": sent.text}],
                message=sent.message,
                body=params,
                principal=None if principal is True else principal,
                bus=self.bus,
                task_group=group,
                on_error=agents.failed,
            )
            await self.start_task(request)

        async with agents.started(sent.session, run_id, running, start, "start_task"):
            configuration = params.get("configuration")
            if (
                not streaming
                and isinstance(configuration, dict)
                and configuration.get("returnImmediately") is True
            ):
                sub.close()
                body = encoder.task_object("TASK_STATE_SUBMITTED")
                await serving.send_json(send, 200, _result(request_id, body))
                return
            pump = _Pump(
                self,
                sub,
                encoder,
                request_id,
                started=False,
                opening=[encoder.task_object("TASK_STATE_SUBMITTED")],
            )
            await self._respond(pump, streaming, send, receive)

    async def _from_start(
        self, session: str, task: str, first_event_id: str | None
    ) -> Subscription[Any]:
        """The task's run from its ``run.started`` (from its snapshot when the bus no
        longer holds its start), then live, to its end."""
        if first_event_id is not None:
            sub = self.bus.resume(
                session=session, run=task, after=first_event_id, at=True, buffer=self.buffer
            )
        else:
            sub = self.bus.subscribe(session=session, run=task, snapshot=True, buffer=self.buffer)
        return await serving.prepared(sub)

    async def _respond(
        self, pump: _Pump, streaming: bool, send: serving.Send, receive: serving.Receive
    ) -> None:
        if not streaming:
            try:
                await pump.collect(send)
            finally:
                pump.sub.close()
            return
        try:
            start = {"type": "http.response.start", "status": 200, "headers": serving.sse_headers()}
            await send(start)
            await serving.event_stream(self._streams, receive, send, pump.run)
        except OSError:
            pass
        finally:
            pump.sub.close()

    # -- GetTask, CancelTask ---------------------------------------------------------------

    async def _task(
        self, request: RequestInfo, params: Any, send: serving.Send, *, decide: bool = False
    ) -> tuple[str, str, Snapshot, RunSnapshot] | None:
        """The task ``params`` name, its session, the session's state and the task's run;
        None once refused (401 / 403 sent)."""
        task = wire.task_param(params)
        session = wire.session_of(task)
        if await self._admit(request, session, send, decide=decide) is None:
            return None
        snapshot = await self._snapshot(session)
        run = next((r for r in snapshot.runs if r.run_id == task), None)
        if run is None:
            raise RpcError(wire.TASK_NOT_FOUND, f"task {task!r} was not found")
        return task, session, snapshot, run

    async def _get(
        self, request: RequestInfo, request_id: object, params: Any, send: serving.Send
    ) -> None:
        found = await self._task(request, params, send)
        if found is None:
            return
        task, session, snapshot, _ = found
        await serving.send_json(send, 200, _result(request_id, _task_body(snapshot, task, session)))

    async def _cancel(
        self, request: RequestInfo, request_id: object, params: Any, send: serving.Send
    ) -> None:
        found = await self._task(request, params, send, decide=True)
        if found is None:
            return
        task, session, _, run = found
        if run.state != "running":
            raise RpcError(wire.TASK_NOT_CANCELABLE, f"task {task!r} has ended ({run.state})")
        sub = await serving.prepared(
            self.bus.subscribe(RunFinished, session=session, run=task, buffer=self.buffer)
        )
        try:
            here = self._agents.running.get((session, task))
            if here is not None:
                here.cancel()
            elif self.cancel_task is None or not await self.cancel_task(session, task):
                raise RpcError(
                    wire.TASK_NOT_CANCELABLE, f"task {task!r} does not run in this server"
                )
            with anyio.move_on_after(self.cancel_timeout):
                async for event in sub:
                    if isinstance(event, RunFinished) and event.run_id == task:
                        break
        finally:
            await sub.aclose()
        body = _task_body(await self._snapshot(session), task, session)
        await serving.send_json(send, 200, _result(request_id, body))

    # -- SubscribeToTask ---------------------------------------------------------------------

    async def _subscribe(
        self,
        request: RequestInfo,
        request_id: object,
        params: Any,
        send: serving.Send,
        receive: serving.Receive,
    ) -> None:
        found = await self._task(request, params, send)
        if found is None:
            return
        task, session, _, _ = found
        encoder = wire.Encoder(task, session)
        after = request.headers.get("last-event-id", "").strip()
        if after:
            sub = self.bus.resume(session=session, run=task, after=after, buffer=self.buffer)
        else:  # the task as it stands, then live: the reset the bus starts with
            sub = self.bus.subscribe(session=session, run=task, snapshot=True, buffer=self.buffer)
        sub = await serving.prepared(sub)
        origin = sub.origin
        if origin is not None and not origin.reset and isinstance(origin.state, Snapshot):
            # The Task as it stood at the cursor: what follows it is exactly what the
            # client missed (an opening of the task as it is now would overlap it).
            opening = wire.opening_task(origin.state, encoder, after)
            pump = _Pump(self, sub, encoder, request_id, started=True, opening=[opening])
        else:
            pump = _Pump(self, sub, encoder, request_id, started=True, reset_opens=True)
        await self._respond(pump, True, send, receive)


def _envelope(envelope: object) -> tuple[str, object, Any]:
    """The method, id and params of a JSON-RPC 2.0 request."""
    if not isinstance(envelope, dict):
        raise RpcError(wire.INVALID_REQUEST, "a request is a JSON-RPC 2.0 object")
    request_id = envelope.get("id")
    if not (request_id is None or isinstance(request_id, (str, int))) or isinstance(
        request_id, bool
    ):
        raise RpcError(wire.INVALID_REQUEST, "the id must be a string, a number or null")
    if envelope.get("jsonrpc") != "2.0":
        raise RpcError(wire.INVALID_REQUEST, 'the request must say "jsonrpc": "2.0"')
    method = envelope.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(wire.INVALID_REQUEST, "the method must be a string")
    params = envelope.get("params", {})
    return method, request_id, params


def _unavailable(exc: BaseException) -> RpcError:
    return RpcError(wire.INTERNAL_ERROR, f"the event bus is unavailable: {exc}")


def _result(request_id: object, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _task_body(snapshot: Snapshot, task: str, session: str) -> dict[str, Any]:
    body = wire.task_of(snapshot, task, session)
    if body is None:
        raise RpcError(wire.TASK_NOT_FOUND, f"task {task!r} was not found")
    return body


def _frame(response: dict[str, Any]) -> bytes:
    """A JSON-RPC response as an SSE event."""
    return b"data: " + dumpb(response) + b"\n\n"


async def _write(send: serving.Send, chunks: list[bytes]) -> None:
    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})


class _Pump:
    """One response: the task's events as ``StreamResponse`` objects, until the task
    ends or waits for a person (``TASK_STATE_INPUT_REQUIRED`` ends the response)."""

    def __init__(
        self,
        app: A2AApp,
        sub: Subscription[Any],
        encoder: wire.Encoder,
        request_id: object,
        *,
        started: bool,
        opening: list[dict[str, Any]] | None = None,
        skip: set[str] | None = None,
        reset_opens: bool = False,
    ) -> None:
        self.app = app
        self.sub = sub
        self.encoder = encoder
        self.request_id = request_id
        self.started = started
        self.opening = opening or []
        #: Approvals answered by this request: what comes up to their requests is what
        #: the client has (its last response ended there) and is not sent again.
        self.skip = set(skip) if skip else None
        #: The first thing the bus delivers is a reset (the task as it stands): it is
        #: sent as the opening ``Task``.
        self.reset_opens = reset_opens

    async def responses(self) -> Any:
        """The ``StreamResponse`` objects, then None at each heartbeat."""
        for opening in self.opening:
            yield opening
        encoder = self.encoder
        deadline = None if self.started else time.monotonic() + self.app.start_timeout

        def wait() -> float:
            if deadline is None:
                return self.app.heartbeat
            return min(self.app.heartbeat, max(0.0, deadline - time.monotonic()))

        paced = beats(self.sub, self.sub.batches(), wait)
        async with aclosing(paced):
            async for batch in paced:
                if batch is None:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise RpcError(
                            wire.INTERNAL_ERROR, "the agent did not start the task in time"
                        )
                    yield None
                    continue
                deadline = None
                if self.reset_opens:
                    self.reset_opens = False
                    yield self._opening(batch[0])
                    batch = batch[1:] if isinstance(batch[0], StreamReset) else batch
                    if not batch:
                        continue
                if self.skip is not None:
                    batch = self._skipped(batch)
                ends = _wait_point(batch)
                for k, event in enumerate(batch):
                    for response in encoder.encode(event):
                        yield response
                    if encoder.final is not None:
                        return
                    if k == ends and encoder.waiting:
                        return  # the task requires input: what follows continues it
                if isinstance(batch[-1], RunFinished) and batch[-1].run_id == encoder.task:
                    return  # interrupted: the run ended waiting for a person

    def _opening(self, first: Any) -> dict[str, Any]:
        """The opening ``Task`` of a subscription: the state its reset carries."""
        encoder = self.encoder
        if isinstance(first, StreamReset):
            return wire.opening_task(first.snapshot, encoder, first.id)
        return encoder.task_object("TASK_STATE_WORKING")

    def _skipped(self, batch: list[Any]) -> list[Any]:
        """What of ``batch`` is sent: the events after the requests of the approvals
        this request answered (the client has the rest; the encoder learns it)."""
        skip = self.skip
        assert skip is not None
        for k, event in enumerate(batch):
            if isinstance(event, StreamReset):
                # The bus no longer holds the run from its start: the client gets the
                # task's state from here (it cannot know what it already has).
                self.skip = None
                return batch[k:]
            self.encoder.encode(event)
            if isinstance(event, ApprovalRequested):
                skip.discard(event.approval_id)
            if not skip:
                self.skip = None
                return batch[k + 1 :]
        return []

    async def run(self, send: serving.Send) -> None:
        """Write the response as SSE through ``send``."""
        try:
            async with aclosing(self.responses()) as responses:
                async for response in responses:
                    if response is None:
                        await _write(send, [_PING])
                    else:
                        await _write(send, [_frame(_result(self.request_id, response))])
        except SlowConsumer as exc:
            logger.info("cutting a slow A2A client: %s", exc)
        except RpcError as exc:
            await _write(send, [_frame(exc.body(self.request_id))])
        except (BusUnavailable, BusClosed) as exc:
            await _write(send, [_frame(_unavailable(exc).body(self.request_id))])

    async def collect(self, send: serving.Send) -> None:
        """``SendMessage``: wait for the end (or the wait for a person), answer the
        ``Task`` as it then stands."""
        # Answered here, not by the request's handler: inside a task group (a new
        # task's), an exception would reach it wrapped in a group.
        encoder = self.encoder
        try:
            try:
                async with aclosing(self.responses()) as responses:
                    async for _ in responses:
                        pass
            except SlowConsumer:
                pass
            snapshot = await self.app._snapshot(encoder.session)
            body = _result(
                self.request_id, {"task": _task_body(snapshot, encoder.task, encoder.session)}
            )
        except RpcError as exc:
            body = exc.body(self.request_id)
        except (BusUnavailable, BusClosed) as exc:
            body = _unavailable(exc).body(self.request_id)
        await serving.send_json(send, 200, body)


def _wait_point(batch: list[Any]) -> int:
    """The index of the last approval request of ``batch`` not decided within it (the
    response ends there), or -1."""
    decided = {e.approval_id for e in batch if isinstance(e, ApprovalResolved)}
    for k in range(len(batch) - 1, -1, -1):
        event = batch[k]
        if isinstance(event, ApprovalRequested) and event.approval_id not in decided:
            return k
    return -1
