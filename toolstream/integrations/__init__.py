"""Agent frameworks announcing their tool calls through toolstream, one module each.

Each module imports its framework lazily and is an optional extra
(``pip install "toolstream[pydantic-ai]"``); importing it without the framework raises
an ``ImportError`` that names the extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, framework: str) -> ModuleType:
    """Import ``module`` or fail with an ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f'toolstream.integrations needs {framework}: pip install "toolstream[{extra}]" ({exc})'
        ) from exc
