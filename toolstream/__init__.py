"""toolstream: stream the lifecycle of an AI agent's tool calls to whoever watches.

An agent framework announces its tool calls on a :class:`Tracker`; the
:class:`EventBus` orders, bounds and replays them; subscribers, transports and
dialects deliver them. Everything public is importable from here; the modules
under ``toolstream._core`` are private.
"""

from ._core.approvals import Decision as Decision
from ._core.auth import Principal as Principal
from ._core.auth import RequestInfo as RequestInfo
from ._core.bus import Bus as Bus
from ._core.bus import BusStats as BusStats
from ._core.bus import EventBus as EventBus
from ._core.codec import from_dict as from_dict
from ._core.codec import json_schema as json_schema
from ._core.codec import to_dict as to_dict
from ._core.errors import ApprovalAlreadyResolved as ApprovalAlreadyResolved
from ._core.errors import ApprovalDenied as ApprovalDenied
from ._core.errors import ApprovalError as ApprovalError
from ._core.errors import ApprovalExpired as ApprovalExpired
from ._core.errors import ApprovalInvalid as ApprovalInvalid
from ._core.errors import ApprovalNotFound as ApprovalNotFound
from ._core.errors import BusClosed as BusClosed
from ._core.errors import BusUnavailable as BusUnavailable
from ._core.errors import DialectError as DialectError
from ._core.errors import EventDecodeError as EventDecodeError
from ._core.errors import IdTooLong as IdTooLong
from ._core.errors import LifecycleError as LifecycleError
from ._core.errors import ProviderStreamError as ProviderStreamError
from ._core.errors import SlowConsumer as SlowConsumer
from ._core.errors import ToolstreamError as ToolstreamError
from ._core.events import EVENT_TYPES as EVENT_TYPES
from ._core.events import ApprovalRequested as ApprovalRequested
from ._core.events import ApprovalResolved as ApprovalResolved
from ._core.events import BatchPhase as BatchPhase
from ._core.events import BatchSnapshot as BatchSnapshot
from ._core.events import CallSnapshot as CallSnapshot
from ._core.events import CallState as CallState
from ._core.events import DecidedApproval as DecidedApproval
from ._core.events import ErrorInfo as ErrorInfo
from ._core.events import Event as Event
from ._core.events import JSONValue as JSONValue
from ._core.events import MessageDelta as MessageDelta
from ._core.events import MessageFinished as MessageFinished
from ._core.events import MessageSnapshot as MessageSnapshot
from ._core.events import MessageStarted as MessageStarted
from ._core.events import PendingApproval as PendingApproval
from ._core.events import RunFinished as RunFinished
from ._core.events import RunSnapshot as RunSnapshot
from ._core.events import RunStarted as RunStarted
from ._core.events import Snapshot as Snapshot
from ._core.events import StreamReset as StreamReset
from ._core.events import ToolArgsDelta as ToolArgsDelta
from ._core.events import ToolCancelled as ToolCancelled
from ._core.events import ToolCompleted as ToolCompleted
from ._core.events import ToolCreated as ToolCreated
from ._core.events import ToolDenied as ToolDenied
from ._core.events import ToolEvent as ToolEvent
from ._core.events import ToolFailed as ToolFailed
from ._core.events import ToolOutputDelta as ToolOutputDelta
from ._core.events import ToolOutputPartial as ToolOutputPartial
from ._core.events import ToolProgress as ToolProgress
from ._core.events import ToolQueued as ToolQueued
from ._core.events import ToolReady as ToolReady
from ._core.events import ToolStarted as ToolStarted
from ._core.handle import CallHandle as CallHandle
from ._core.identifiers import MAX_ID_BYTES as MAX_ID_BYTES
from ._core.message import MessageHandle as MessageHandle
from ._core.payload import PayloadPolicy as PayloadPolicy
from ._core.redaction import DEFAULT_SECRET_KEYS as DEFAULT_SECRET_KEYS
from ._core.redaction import DEFAULT_SECRET_PATTERNS as DEFAULT_SECRET_PATTERNS
from ._core.redaction import ArgsRedactor as ArgsRedactor
from ._core.redaction import TextRedactor as TextRedactor
from ._core.scopes import Batch as Batch
from ._core.scopes import CallScope as CallScope
from ._core.scopes import RunScope as RunScope
from ._core.start import Origin as Origin
from ._core.start import Overflow as Overflow
from ._core.subscription import Subscription as Subscription
from ._core.summaries import CallInfo as CallInfo
from ._core.summaries import Summaries as Summaries
from ._core.summaries import Summarizer as Summarizer
from ._core.summaries import format_duration as format_duration
from ._core.tracker import Tracker as Tracker
from ._core.view import LiveView as LiveView

__version__ = "0.1.0.dev0"

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_SECRET_PATTERNS",
    "MAX_ID_BYTES",
    "EVENT_TYPES",
    "ApprovalAlreadyResolved",
    "ApprovalDenied",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalInvalid",
    "ApprovalNotFound",
    "ApprovalRequested",
    "ApprovalResolved",
    "ArgsRedactor",
    "Batch",
    "BatchPhase",
    "BatchSnapshot",
    "Bus",
    "BusClosed",
    "BusUnavailable",
    "BusStats",
    "CallHandle",
    "CallInfo",
    "CallScope",
    "CallSnapshot",
    "CallState",
    "Decision",
    "DialectError",
    "ErrorInfo",
    "Event",
    "EventBus",
    "EventDecodeError",
    "JSONValue",
    "IdTooLong",
    "LifecycleError",
    "LiveView",
    "MessageDelta",
    "MessageFinished",
    "MessageHandle",
    "MessageSnapshot",
    "MessageStarted",
    "Origin",
    "Overflow",
    "PayloadPolicy",
    "PendingApproval",
    "DecidedApproval",
    "Principal",
    "ProviderStreamError",
    "RequestInfo",
    "RunFinished",
    "RunScope",
    "RunSnapshot",
    "RunStarted",
    "SlowConsumer",
    "Snapshot",
    "StreamReset",
    "Subscription",
    "Summaries",
    "Summarizer",
    "TextRedactor",
    "ToolArgsDelta",
    "ToolCancelled",
    "ToolCompleted",
    "ToolCreated",
    "ToolDenied",
    "ToolEvent",
    "ToolFailed",
    "ToolOutputDelta",
    "ToolOutputPartial",
    "ToolProgress",
    "ToolQueued",
    "ToolReady",
    "ToolStarted",
    "ToolstreamError",
    "Tracker",
    "format_duration",
    "from_dict",
    "json_schema",
    "to_dict",
]
