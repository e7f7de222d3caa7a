"""The native dialect: ``event: <type>``, payload ``to_dict(event)``."""

from __future__ import annotations

from collections.abc import Mapping

from toolstream import Event, to_dict

from ._base import BaseDialect, WireMessage

__all__ = ["Native"]


class Native(BaseDialect):
    """toolstream's own format: one message per event, ``event: <type>`` and the
    event as ``to_dict`` gives it (``"v": 1``, snake_case, JSON Schema in
    ``docs/schema/native-v1.json``)."""

    name = "native"
    headers: Mapping[str, str] = {}
    #: One event always becomes the same messages: transports may share the encoding
    #: of an event between all their clients.
    stateless = True

    def encode(self, event: Event) -> list[WireMessage]:
        """One message: the event's type and its native dict."""
        return [WireMessage(event=event.type, payload=to_dict(event))]
