"""The driver seam's public names (``toolstream.broker``): pinned, documented, and
checked at construction."""

from __future__ import annotations

import inspect
import time

import pytest

import toolstream.broker as tb
from toolstream._core.snapshots import DEFAULT_RESET_BYTES

PUBLIC = {
    "Appended",
    "ApprovalState",
    "Broker",
    "BrokerBus",
    "BrokerBusStats",
    "BrokerReader",
    "BrokerSubscription",
    "BusOptions",
    "Chunk",
    "Decide",
    "OutboxOverflow",
    "Record",
    "RecordKind",
    "Refused",
    "Resolution",
    "StoredState",
    "Variant",
}


def test_the_broker_module_exports_exactly_the_seam() -> None:
    assert set(tb.__all__) == PUBLIC
    assert len(tb.__all__) == len(PUBLIC)


def test_every_class_and_method_of_the_seam_is_documented() -> None:
    for name in tb.__all__:
        obj = getattr(tb, name)
        if not inspect.isclass(obj):
            continue
        assert obj.__doc__ and obj.__doc__.strip(), name
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not callable(member):
                continue
            assert member.__doc__, f"{name}.{attr} has no docstring"


def test_a_bus_needs_a_driver() -> None:
    with pytest.raises(TypeError, match="Broker driver"):
        tb.BrokerBus(object())  # type: ignore[arg-type]


#: The public signatures of the broker buses: keyword, default (``...``: required).
REDIS = {
    "url": "redis://127.0.0.1:6379/0",
    "prefix": "toolstream",
    "replay": 1_000,
    "session_ttl": 3600.0,
    "outbox": 100_000,
    "outbox_overflow": "drop-deltas",
    "lease": 10.0,
    "reap": True,
    "connect_timeout": 5.0,
    "batch": 512,
    "clock": time.time,
    "max_finished": 500,
    "reset_bytes": DEFAULT_RESET_BYTES,
    "payload": None,
    "cluster": None,
}
NATS = {
    "servers": "nats://127.0.0.1:4222",
    "prefix": "toolstream",
    "replicas": 1,
    "replay": 1_000,
    "session_ttl": 3600.0,
    "outbox": 100_000,
    "outbox_overflow": "drop-deltas",
    "lease": 10.0,
    "reap": True,
    "connect_timeout": 5.0,
    "request_timeout": 2.0,
    "batch": 256,
    "clock": time.time,
    "max_finished": 500,
    "reset_bytes": DEFAULT_RESET_BYTES,
    "payload": None,
}
POSTGRES = {"dsn": ..., "prefix": "toolstream", "retention": 604800.0, "pool": 8}


def _signature(cls: type) -> dict[str, object]:
    params = inspect.signature(cls).parameters.values()
    return {
        p.name: (... if p.default is inspect.Parameter.empty else p.default)
        for p in params
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def test_the_broker_buses_keep_their_signatures() -> None:
    from toolstream.nats import NatsBus
    from toolstream.postgres import PostgresBus
    from toolstream.redis import RedisBus

    assert _signature(RedisBus) == REDIS
    assert _signature(NatsBus) == NATS
    assert _signature(PostgresBus) == POSTGRES
    # PostgresBus takes BrokerBus's options as **options (all but replay: its history
    # is kept by time).
    assert set(tb.BusOptions.__annotations__) == set(REDIS) - {
        "url",
        "prefix",
        "replay",
        "session_ttl",
        "cluster",
    }
    for cls in (RedisBus, NatsBus, PostgresBus):
        assert issubclass(cls, tb.BrokerBus)
