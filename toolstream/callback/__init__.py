"""Callbacks: plain functions as subscribers, and bridges to the callback style agent
frameworks already use (``tool_start_callback`` / ``tool_complete_callback`` /
``tool_progress_callback``), both ways.
"""

from __future__ import annotations

from ._legacy import LegacyCallbacks, LegacyCallbackSink, legacy_callbacks
from ._sink import CallbackSink

__all__ = ["CallbackSink", "LegacyCallbackSink", "LegacyCallbacks", "legacy_callbacks"]
