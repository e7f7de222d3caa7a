"""The public API is exactly what is listed here: changing it is a visible, deliberate diff."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import toolstream as ts
import toolstream.testing

PUBLIC = {
    "PendingApproval",
    "DecidedApproval",
    "Decision",
    "ApprovalResolved",
    "ApprovalRequested",
    "ApprovalNotFound",
    "ApprovalInvalid",
    "ApprovalExpired",
    "ApprovalError",
    "ApprovalDenied",
    "ApprovalAlreadyResolved",
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_SECRET_PATTERNS",
    "MAX_ID_BYTES",
    "IdTooLong",
    "EVENT_TYPES",
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
    "DialectError",
    "ErrorInfo",
    "Event",
    "EventBus",
    "EventDecodeError",
    "JSONValue",
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
}


#: ``toolstream.testing``: helpers for users' tests, and the in-memory broker.
TESTING = {
    "BrokerDown",
    "BusFactory",
    "MemoryBroker",
    "Recorder",
    "StallingBroker",
    "assert_ids_increase",
    "assert_lifecycle",
    "bus_conformance_checks",
    "serve",
    "sse_data",
}


def test_all_is_the_documented_api() -> None:
    assert set(ts.__all__) == PUBLIC
    assert len(ts.__all__) == len(PUBLIC), "a name is listed twice in __all__"


def test_every_public_name_exists_and_is_documented() -> None:
    for name in ts.__all__:
        obj = getattr(ts, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring"


def test_the_api_page_lists_every_public_name() -> None:
    page = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    listed = set(re.findall(r"^\| `([A-Za-z_]+)` \|", page, re.MULTILINE))
    assert listed == set(ts.__all__), (
        f"docs/api.md misses {sorted(set(ts.__all__) - listed)}, "
        f"lists unknown {sorted(listed - set(ts.__all__))}"
    )


def test_public_methods_are_documented() -> None:
    for name in ts.__all__:
        obj = getattr(ts, name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not callable(member):
                continue
            assert member.__doc__, f"{name}.{attr} has no docstring"


def test_testing_exports_exactly_its_helpers_each_documented() -> None:
    testing = toolstream.testing
    assert set(testing.__all__) == TESTING
    assert len(testing.__all__) == len(TESTING), "a name is listed twice in __all__"
    for name in testing.__all__:
        obj = getattr(testing, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        assert obj.__doc__ and obj.__doc__.strip(), f"testing.{name} has no docstring"
        for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
            if not attr.startswith("_") and callable(member):
                assert member.__doc__, f"testing.{name}.{attr} has no docstring"


def test_every_error_derives_from_the_base() -> None:
    for name in ts.__all__:
        obj = getattr(ts, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, ts.ToolstreamError), name


def test_event_classes_are_frozen_slotted_and_named() -> None:
    wire = [cls.type for cls in ts.EVENT_TYPES]
    assert wire == [
        "run.started",
        "run.finished",
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.queued",
        "tool.started",
        "tool.progress",
        "tool.output.delta",
        "tool.output.partial",
        "tool.completed",
        "tool.failed",
        "tool.cancelled",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.denied",
        "batch.phase",
        "message.started",
        "message.delta",
        "message.finished",
        "stream.reset",
    ]
    for cls in ts.EVENT_TYPES:
        assert "__slots__" in vars(cls), cls
        assert getattr(cls, "__attrs_attrs__", None) is not None


#: The chat and A2A transports' public names.
TRANSPORTS = {
    "toolstream.chat": {"BadBody", "CancelTurn", "ChatApp", "StartTurn", "TurnRequest"},
    "toolstream.a2a": {"EXTENSION_URI", "A2AApp", "CancelTask", "StartTask", "TaskRequest"},
}


def test_the_chat_and_a2a_packages_export_exactly_their_names_each_documented() -> None:
    import importlib

    for module_name, names in TRANSPORTS.items():
        module = importlib.import_module(module_name)
        assert set(module.__all__) == names, module_name
        assert module.__doc__, module_name
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                assert obj.__doc__, f"{module_name}.{name} has no docstring"
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and callable(member):
                        assert member.__doc__, f"{module_name}.{name}.{attr} has no docstring"
