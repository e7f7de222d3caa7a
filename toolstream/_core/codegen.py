"""Compiling generated functions so that tracebacks and debuggers can show their source.

The builders and encoders generated per event class are real code a person may have to
step through. As ``attrs`` does for its generated methods, each one is compiled under a
unique file name whose source is registered in ``linecache``: a traceback then shows
the generated line instead of ``File "<string>"``.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["compile_functions"]

_counter = itertools.count(1)


def compile_functions(
    source: str, namespace: dict[str, Any], *, what: str, names: tuple[str, ...]
) -> tuple[Callable[..., Any], ...]:
    """Execute ``source`` (function definitions) in ``namespace`` and return the
    functions called ``names``. ``what`` names the code in its file name, e.g.
    ``"builders for ToolProgress"``."""
    filename = f"<toolstream generated {what} #{next(_counter)}>"
    # The mtime None keeps linecache.checkcache() from dropping the entry.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)  # generated from attrs field names
    return tuple(namespace[name] for name in names)
