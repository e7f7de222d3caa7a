"""The driver seam's public names (``toolstream.broker``): pinned, documented, and
checked at construction."""

from __future__ import annotations

import inspect

import pytest

import toolstream.broker as tb

PUBLIC = {
    "Appended",
    "ApprovalState",
    "Broker",
    "BrokerBus",
    "BrokerBusStats",
    "BrokerReader",
    "BrokerSubscription",
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
