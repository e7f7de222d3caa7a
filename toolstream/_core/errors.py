"""The exceptions toolstream raises; every one derives from :class:`ToolstreamError`."""

from __future__ import annotations

from typing import Any


class ToolstreamError(Exception):
    """Base class of every exception toolstream raises on purpose."""


class LifecycleError(ToolstreamError):
    """A tool call was reported out of order (strict trackers only).

    Raised for a second terminal event, an event the call's state forbids, or a
    backwards transition. The message names the call, its state and the attempt.
    """

    def __init__(self, message: str, *, call_id: str, state: str, attempted: str) -> None:
        super().__init__(message)
        self.call_id = call_id
        self.state = state
        self.attempted = attempted


class SlowConsumer(ToolstreamError):
    """A subscription fell further behind than its buffer allows and was cut.

    Raised only by the subscription's iterator. Resume with ``after=`` the id of
    the last event you handled.
    """

    def __init__(self, message: str, *, last_id: str | None = None) -> None:
        super().__init__(message)
        #: The id of the last event this subscription delivered, if any: resume after it.
        self.last_id = last_id


class ProviderStreamError(ToolstreamError):
    """A provider stream chunk was malformed; the message names the chunk and field."""


class DialectError(ToolstreamError):
    """A wire dialect could not be created or could not encode an event."""


class EventDecodeError(ToolstreamError, ValueError):
    """A dict given to :func:`toolstream.from_dict` is not a valid toolstream event."""


class IdTooLong(ToolstreamError, ValueError):
    """A session name, run, call, message or approval id, or tool name longer than
    ``toolstream.MAX_ID_BYTES`` (1,024) bytes of UTF-8: refused where it enters (a
    broker could not carry it in its subjects and keys)."""


class BusClosed(ToolstreamError):
    """The bus was closed: no more events are published or delivered."""


class BusUnavailable(ToolstreamError, ConnectionError):
    """A broker-backed bus could not reach its broker in time (a subscription could
    not learn where to start). Publishing never raises it: events wait in the outbox.
    """


class ApprovalError(ToolstreamError):
    """Base class of the errors about an approval decision."""


class ApprovalNotFound(ApprovalError, LookupError):
    """No approval of this id in this session: unknown, forgotten, or another
    session's (the same error either way, so ids of other sessions do not leak)."""


class ApprovalAlreadyResolved(ApprovalError):
    """The approval was decided already; ``resolution`` is the decision that won."""

    def __init__(self, message: str, *, resolution: Any) -> None:
        super().__init__(message)
        #: The ``ApprovalResolved`` event that won.
        self.resolution = resolution


class ApprovalExpired(ApprovalError):
    """The approval expired before this decision; ``resolution`` is its resolution by
    ``"timeout"`` (the call ended ``denied`` if it was waiting to run)."""

    def __init__(self, message: str, *, resolution: Any) -> None:
        super().__init__(message)
        #: The ``ApprovalResolved`` event (``by="timeout"``).
        self.resolution = resolution


class ApprovalInvalid(ApprovalError, ValueError):
    """A decision that cannot be applied: edited args that are not a JSON object or are
    over the size cap, a non-boolean ``approved``..."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        #: True when the edited args are over the size cap (HTTP 413).
        self.too_large = too_large


class ApprovalDenied(ApprovalError):
    """Raised by ``async with tracker.call(..., approval=...)`` when the block will not
    run for want of an approval (denied, expired, or ended while waiting); the call
    has already ended. ``decision`` says why."""

    def __init__(self, message: str, *, decision: Any) -> None:
        super().__init__(message)
        #: The :class:`~toolstream.Decision` that refused the call.
        self.decision = decision
