"""Optional dependencies: a module that needs one fails to import with an ``ImportError``
that names the extra to install (``pip install "toolstream[<extra>]"``), never a bare
``ModuleNotFoundError`` from deep inside."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` for ``what`` (e.g. ``"toolstream.client"``), or raise an
    ``ImportError`` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{what} needs the {module.split('.')[0]!r} package: "
            f'pip install "toolstream[{extra}]" ({exc})'
        ) from exc
