"""Provider stream ingestion: a tool card the moment the model names the tool.

Replace an agent loop's own stream accumulator with an ingest; it announces each call at
its first fragment, streams its input, and makes it ``ready`` as soon as the input is
complete::

    ingest = OpenAIChatIngest(tracker, on_text=print)
    async for chunk in stream:            # the provider's stream, dicts or SDK objects
        ingest.feed(chunk)
    for h in ingest.finish():
        async with tracker.call(h.tool, h.args, call_id=h.call_id) as call:
            call.complete(await run_tool(h.tool, h.args))
"""

from __future__ import annotations

from ._base import Ingest
from .anthropic import AnthropicIngest
from .openai_chat import OpenAIChatIngest
from .openai_responses import OpenAIResponsesIngest

__all__ = ["AnthropicIngest", "Ingest", "OpenAIChatIngest", "OpenAIResponsesIngest"]
