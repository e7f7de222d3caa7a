"""A2A v1.0 served from a toolstream bus: the agent card, the JSON-RPC methods, the tool
lifecycle in status updates, and a resubscribe that replays exactly what was missed.

    from toolstream.a2a import A2AApp, TaskRequest

    async def start_task(request: TaskRequest) -> None:
        request.start_soon(run_agent, request.session, request.run_id, request.user_text)

    app = A2AApp(bus, start_task, card={"name": "Researcher", "description": "…"})
"""

from __future__ import annotations

from ._app import A2AApp, CancelTask, StartTask, TaskRequest
from ._wire import EXTENSION_URI

__all__ = ["EXTENSION_URI", "A2AApp", "CancelTask", "StartTask", "TaskRequest"]
