"""Measuring what the process holds, with tracemalloc: bytes Python allocated and still
holds, counted the same on any machine."""

from __future__ import annotations

import fnmatch
import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def traced() -> Iterator[list[int]]:
    """Trace allocations while the block runs; the list gets the bytes still allocated
    at its end, counted from its start."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    held = [0]
    gc.collect()
    start = tracemalloc.get_traced_memory()[0]
    try:
        yield held
        gc.collect()
        held[0] = tracemalloc.get_traced_memory()[0] - start
    finally:
        if not was_tracing:
            tracemalloc.stop()


def held_by(*patterns: str) -> int:
    """Bytes still allocated by code in files matching ``patterns`` (fnmatch, e.g.
    ``"*/toolstream/sse/*"``), counted from when tracing started."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    return sum(
        stat.size
        for stat in snapshot.statistics("filename")
        if any(fnmatch.fnmatch(stat.traceback[0].filename, p) for p in patterns)
    )
