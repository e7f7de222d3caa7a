"""Chat endpoints real clients drive: :class:`ChatApp` serves AI SDK ``useChat``,
AG-UI's ``HttpAgent`` and LangGraph's ``useStream`` (``dialect="langgraph"``) — a POST
starts (or continues) a turn, the response is its stream.

::

    from toolstream.chat import ChatApp, TurnRequest

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(my_agent, request)   # announces run request.run_id

    app = ChatApp(bus, start_turn)              # POST /  and  GET /<chat id>/stream
"""

from __future__ import annotations

from ._agents import CancelTurn, StartTurn, TurnRequest
from ._app import ChatApp
from ._bodies import BadBody

__all__ = ["BadBody", "CancelTurn", "ChatApp", "StartTurn", "TurnRequest"]
