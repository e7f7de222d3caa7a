"""One background thread that runs delayed flushes (the tracker's ``coalesce``).

Trackers may be driven from any thread or event loop, so the flush of coalesced
deltas cannot rely on one loop's timers: a single daemon thread runs them all.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("toolstream.tracker")

__all__ = ["call_later"]

_lock = threading.Condition()
_heap: list[tuple[float, int, Callable[[], None]]] = []
_counter = itertools.count()
_thread: threading.Thread | None = None


def call_later(delay: float, fn: Callable[[], None]) -> None:
    """Run ``fn()`` on the scheduler thread after ``delay`` seconds."""
    global _thread
    deadline = time.monotonic() + delay
    with _lock:
        heapq.heappush(_heap, (deadline, next(_counter), fn))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="toolstream-scheduler", daemon=True)
            _thread.start()
        _lock.notify()


def _run() -> None:
    while True:
        with _lock:
            while not _heap:
                _lock.wait()
            deadline, _, fn = _heap[0]
            now = time.monotonic()
            if deadline > now:
                _lock.wait(deadline - now)
                continue
            heapq.heappop(_heap)
        try:
            fn()
        except Exception:
            logger.exception("a delayed flush failed")
