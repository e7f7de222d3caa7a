"""The servers of the ``chat_agent`` benchmark, each in its own process under uvicorn:
the same framework agent, with the same fake model, served to an AI SDK client either
by toolstream (``ChatApp(bus, chat_agent(agent))``) or by the framework's own way.

``python -m benchmarks.chat_agents_server KIND PORT``, KIND one of:

- ``pydantic-ai``: ``ChatApp`` + ``toolstream.integrations.pydantic_ai.chat_agent``;
- ``pydantic-ai-adapter``: pydantic-ai's own ``VercelAIAdapter.dispatch_request``;
- ``langgraph``: ``ChatApp`` + ``toolstream.integrations.langgraph.chat_agent``;
- ``langgraph-handwritten``: a FastAPI endpoint that streams the graph
  (``stream_mode=["messages", "updates"]``) and writes the UI message chunks by hand
  through sse-starlette, as users do without a library.

The turn, as fast as it goes: ``TOKENS`` text deltas, one tool call that returns at
once, ``TOKENS`` text deltas.
"""

import json
import secrets
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

import toolstream as ts

TOKENS = 20


def pydantic_agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    async def model(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        answered = isinstance(messages[-2], ModelResponse) if len(messages) > 1 else False
        for i in range(TOKENS):
            yield f"t{i} "
        if not answered:
            call_id = f"call_{secrets.token_hex(6)}"
            yield {0: DeltaToolCall(name="lookup", json_args='{"q": "x"}', tool_call_id=call_id)}

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=model))

    @agent.tool_plain
    def lookup(q: str) -> dict[str, int]:
        return {"ok": 1}

    return agent


def langgraph_graph() -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    class Model(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def _astream(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> AsyncIterator[ChatGenerationChunk]:
            for i in range(TOKENS):
                yield ChatGenerationChunk(message=AIMessageChunk(content=f"t{i} "))
            if messages[-1].type != "tool":
                part: Any = {
                    "name": "lookup",
                    "args": '{"q": "x"}',
                    "id": f"call_{secrets.token_hex(6)}",
                    "index": 0,
                    "type": "tool_call_chunk",
                }
                chunk = AIMessageChunk(content="", tool_call_chunks=[part])
                yield ChatGenerationChunk(message=chunk)

    @tool
    def lookup(q: str) -> dict[str, int]:
        """Look something up."""
        return {"ok": 1}

    model = Model()

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def chat_app(kind: str) -> Any:
    from toolstream.chat import ChatApp

    bus = ts.EventBus()
    if kind == "pydantic-ai":
        from toolstream.integrations.pydantic_ai import chat_agent as pydantic_chat

        return ChatApp(bus, pydantic_chat(pydantic_agent()))
    from toolstream.integrations.langgraph import chat_agent as langgraph_chat

    return ChatApp(bus, langgraph_chat(langgraph_graph()))


def adapter_app() -> Any:
    """pydantic-ai's own AI SDK endpoint."""
    from pydantic_ai.ui.vercel_ai import VercelAIAdapter
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    agent = pydantic_agent()

    async def chat(request: Request) -> Response:
        return await VercelAIAdapter.dispatch_request(request, agent=agent, sdk_version=6)

    return Starlette(routes=[Route("/", chat, methods=["POST"])])


def handwritten_langgraph_app() -> Any:
    """The graph streamed to the AI SDK by hand: text deltas from the ``messages`` mode,
    each tool call and its result from the ``updates`` mode."""
    from fastapi import FastAPI, Request
    from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
    from sse_starlette.sse import EventSourceResponse

    graph = langgraph_graph()
    app = FastAPI()

    async def turn(body: dict[str, Any]) -> AsyncIterator[dict[str, str]]:
        def chunk(**fields: Any) -> dict[str, str]:
            return {"data": json.dumps(fields)}

        text = "".join(p.get("text", "") for p in body["messages"][-1].get("parts", []))
        config: Any = {"configurable": {"thread_id": body["id"]}}
        yield chunk(type="start", messageId=f"msg_{secrets.token_hex(6)}")
        yield chunk(type="start-step")
        open_text: str | None = None
        async for mode, item in graph.astream(
            {"messages": [("user", text)]}, config, stream_mode=["messages", "updates"]
        ):
            if mode == "messages":
                message = item[0]
                content = getattr(message, "content", None)
                if isinstance(message, AIMessageChunk) and isinstance(content, str) and content:
                    if open_text != message.id:
                        open_text = str(message.id)
                        yield chunk(type="text-start", id=open_text)
                    yield chunk(type="text-delta", id=open_text, delta=content)
                continue
            for update in item.values():
                for message in (update or {}).get("messages", []):
                    if open_text is not None:
                        yield chunk(type="text-end", id=open_text)
                        open_text = None
                    if isinstance(message, AIMessage):
                        for call in message.tool_calls:
                            common = {"toolCallId": call["id"], "toolName": call["name"]}
                            yield chunk(type="tool-input-start", **common)
                            yield chunk(type="tool-input-available", input=call["args"], **common)
                    elif isinstance(message, ToolMessage):
                        yield chunk(
                            type="tool-output-available",
                            toolCallId=message.tool_call_id,
                            output=message.content,
                        )
        if open_text is not None:
            yield chunk(type="text-end", id=open_text)
        yield chunk(type="finish-step")
        yield chunk(type="finish")
        yield {"data": "[DONE]"}

    @app.post("/")
    async def post(request: Request) -> EventSourceResponse:
        body = await request.json()
        headers = {"x-vercel-ai-ui-message-stream": "v1"}
        return EventSourceResponse(turn(body), ping=60, headers=headers)

    return app


def main(kind: str, port: int) -> None:
    if kind == "pydantic-ai-adapter":
        app = adapter_app()
    elif kind == "langgraph-handwritten":
        app = handwritten_langgraph_app()
    else:
        app = chat_app(kind)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
