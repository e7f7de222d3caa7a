"""MessageHandle: the assistant's text in a run, streamed like a call's output.

``tracker.message()`` makes one. Its text and reasoning go through the tracker's payload
policy as a call's output text does: streaming redaction (what could still be a secret
is held back until it cannot), chunking, and the tracker's ``coalesce``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from .events import Event, MessageDelta, MessageFinished, MessageKind
from .jsonenc import safe_text

if TYPE_CHECKING:
    from .redaction import TextRedactor
    from .tracker import Tracker

__all__ = ["MessageHandle"]


class MessageHandle:
    """One message of the agent (its answer text and reasoning) inside a run.

    ::

        with tracker.message() as message:
            message.reasoning("The user asks for the weather; ")
            message.delta("It is sunny in Paris.")

    ``delta(text)`` appends answer text, ``reasoning(text)`` reasoning text;
    ``finish()`` (or leaving the ``with`` block) publishes ``message.finished``. A
    message left open is finished when its run finishes or its tracker closes. Every
    method may be called from any thread; calls after ``finish()`` are lifecycle
    violations (dropped with a warning, or raised by a strict tracker).
    """

    __slots__ = (
        "_kind",
        "_redactors",
        "_tracker",
        "finished",
        "message_id",
        "parent_call_id",
        "role",
        "run_id",
    )

    def __init__(self, tracker: Tracker, message_id: str, role: str, run_id: str | None) -> None:
        self._tracker = tracker
        #: The message's id (the AI SDK text part's and AG-UI message's id).
        self.message_id = message_id
        #: ``"assistant"`` unless given.
        self.role = role
        #: The run the message belongs to, if any.
        self.run_id = run_id
        #: The call whose sub-agent says this message, if any.
        self.parent_call_id: str | None = None
        #: True after :meth:`finish`.
        self.finished = False
        self._kind: MessageKind | None = None  # the kind of the newest text
        self._redactors: dict[str, TextRedactor] = {}

    def __repr__(self) -> str:
        return f"<MessageHandle {self.message_id!r} finished={self.finished}>"

    def delta(self, text: str) -> None:
        """Append ``text`` to the message's answer."""
        self._append("text", text)

    def reasoning(self, text: str) -> None:
        """Append ``text`` to the message's reasoning."""
        self._append("reasoning", text)

    def finish(self) -> None:
        """Publish what is held back, then ``message.finished`` (once)."""
        t = self._tracker
        with t._lock:
            if self.finished:
                t._violation(
                    f"message {self.message_id!r} is finished: finish() is not allowed",
                    self.message_id,
                    "finished",
                    "finish",
                )
                return
            self._finish_locked()

    # -- context manager ---------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.finished:
            self.finish()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.finished:
            self.finish()

    # -- internals ---------------------------------------------------------------------

    def _append(self, kind: MessageKind, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"message text must be a str, not {type(text).__name__}")
        t = self._tracker
        with t._lock:
            if self.finished or t._closed:
                op = "delta" if kind == "text" else "reasoning"
                t._violation(
                    f"message {self.message_id!r} is finished: {op}() is not allowed",
                    self.message_id,
                    "finished",
                    op,
                )
                return
            if not text:
                return
            if not text.isascii():
                text = safe_text(text)  # a lone surrogate cannot go on the wire
            # Each kind's text is one text for redaction, however the kinds interleave:
            # what a kind's redactor holds back waits for that kind's next text (a
            # secret may be cut by the other kind's text) or the message's end.
            self._kind = kind
            redactor = self._redactors.get(kind)
            if redactor is None:
                redactor = self._redactors[kind] = t.payload.text_redactor()
            safe = redactor.feed(text)
            if not safe:
                return
            coalescer = t._coalescer
            if coalescer is not None:
                coalescer.message(self, kind, safe)
            else:
                self._publish_text(kind, safe)

    def _finish_locked(self) -> None:
        # The newest kind's held text first: it continues the part a client has open.
        other: MessageKind = "text" if self._kind == "reasoning" else "reasoning"
        self._flush(ends=(self._kind or "reasoning", other))
        self.finished = True
        self._tracker._messages.pop(self.message_id, None)
        self._emit(MessageFinished)

    def _flush(self, *, ends: tuple[MessageKind, ...] = ()) -> None:
        """Publish what coalescing holds, and what the redactors of the kinds whose text
        ``ends`` still hold back (the tracker's lock is held)."""
        coalescer = self._tracker._coalescer
        held = coalescer.release(self) if coalescer is not None else None
        pieces: list[tuple[MessageKind, str]] = list(held.message) if held is not None else []
        for kind in ends:
            redactor = self._redactors.get(kind)
            rest = redactor.flush() if redactor is not None else ""
            if rest:
                pieces.append((kind, rest))
        # Adjacent pieces of one kind go out as one text.
        merged: list[tuple[MessageKind, str]] = []
        for kind, text in pieces:
            if merged and merged[-1][0] == kind:
                merged[-1] = (kind, merged[-1][1] + text)
            else:
                merged.append((kind, text))
        for kind, text in merged:
            self._publish_text(kind, text)

    def _publish_text(self, kind: MessageKind, text: str) -> None:
        for piece in self._tracker.payload.chunks(text):
            self._emit(MessageDelta, piece, kind)

    def _emit(self, cls: type[Event], *values: Any) -> None:
        """Publish ``message.started`` (``values``: the role) or ``message.finished``."""
        t = self._tracker
        envelope = (t.session, self.run_id, "", "", self.parent_call_id, self.message_id)
        t._emit_values(cls, envelope + values)


def check_role(role: object) -> None:
    """A message's role is a non-empty string (``"assistant"``...)."""
    if not isinstance(role, str) or not role or not role.isascii():
        raise ValueError(f"role must be a non-empty ASCII string, got {role!r:.80}")
