"""An A2A gateway process: ``A2AApp`` on a broker bus (Redis, NATS or PostgreSQL, as the
URL says) whose tasks run the canonical script
(tests/chat_scenarios.py) in the process that took them; any gateway process of the
bus answers ``GetTask`` and ``SubscribeToTask`` for them.

python -m tests.a2a_procs gateway URL PREFIX PORT

Serves on 127.0.0.1:PORT; ``/healthz`` answers 200 once it is up
(:func:`tests.chat_procs.wait_until_up`).
"""

from __future__ import annotations

import subprocess
import sys

from tests.chat_procs import with_health


def spawn(*args: str) -> subprocess.Popen[str]:
    """``python -m tests.a2a_procs *args``."""
    from tests.servers import spawn_module

    return spawn_module("tests.a2a_procs", *args)


def gateway(url: str, prefix: str, port: int) -> None:
    """Serve ``A2AApp(<the broker bus of url>)`` on 127.0.0.1:port, its tasks run here."""
    import uvicorn

    from tests.broker_procs import open_bus
    from tests.chat_scenarios import run_script
    from toolstream.a2a import A2AApp, TaskRequest

    bus = open_bus(url, prefix)

    async def start_task(request: TaskRequest) -> None:
        request.start_soon(run_script, bus, request.session, request.run_id, request.user_text)

    app = A2AApp(bus, start_task, card={"name": "Scripted", "description": "The canonical script"})
    uvicorn.run(with_health(app), host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "gateway":
        gateway(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown role {role!r}")
