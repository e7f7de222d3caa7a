"""A live terminal view of a LiveView (rich), shared by ``demo`` and ``tail``.

The view always fits the terminal: open calls first (they are what is happening),
then the newest finished calls, newest first, and a one-line count of the finished
calls that did not fit. The summary takes the width the fixed columns leave.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from rich import box
from rich.console import Console, Group, RenderableType
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from toolstream import CallSnapshot, CallState, LiveView, format_duration

__all__ = ["LiveRenderer", "render_view"]

_STYLE = {
    CallState.CREATED: ("✎", "cyan"),
    CallState.READY: ("◆", "cyan"),
    CallState.AWAITING_APPROVAL: ("!", "bold yellow"),
    CallState.QUEUED: ("…", "blue"),
    CallState.RUNNING: ("", "yellow"),
    CallState.COMPLETED: ("✔", "green"),
    CallState.FAILED: ("✖", "red"),
    CallState.CANCELLED: ("⊘", "magenta"),
    CallState.DENIED: ("⊗", "red"),
    CallState.LOST: ("?", "bright_black"),
}

#: Lines the table itself takes besides its rows: the header and its rule.
_TABLE_LINES = 2
_TOOL_WIDTH = 16


def _icon(call: CallSnapshot) -> RenderableType:
    symbol, style = _STYLE[call.state]
    if call.state is CallState.RUNNING:
        return Spinner("dots", style=style)
    return Text(symbol, style=style)


def _state(call: CallSnapshot) -> Text:
    _, style = _STYLE[call.state]
    text = call.state.value
    if call.state is CallState.AWAITING_APPROVAL:
        text = "awaiting OK"
    if call.state is CallState.RUNNING and call.fraction is not None:
        text = f"running {round(call.fraction * 100):d}%"
    return Text(text, style=style)


def _detail(call: CallSnapshot) -> Text:
    if call.state is CallState.FAILED and call.error is not None:
        return Text(f"{call.error.type}: {call.error.message}", style="red")
    if call.state is CallState.CANCELLED:
        if call.summary:
            return Text(call.summary, style="magenta")
        return Text(f"cancelled: {call.reason}" if call.reason else "cancelled", style="magenta")
    if call.state is CallState.LOST:
        return Text("lost in a restart", style="bright_black")
    pending = call.approval
    if pending is not None:
        why = pending.reason or call.summary or "a person must decide"
        if pending.expires_at is not None:  # first: what a narrow terminal must not cut
            left = format_duration(max(0.0, pending.expires_at - time.time()))
            return Text(f"needs approval (expires in {left}): {why}", style="bold yellow")
        return Text(f"needs approval: {why}", style="bold yellow")
    if call.state is CallState.DENIED:
        return Text(call.summary or "denied", style="red")
    if call.state is CallState.RUNNING and call.message:
        return Text(call.message)
    if call.state is CallState.CREATED and call.args_text:
        return Text(call.args_text[-200:], style="cyan")
    return Text(call.summary or "")


def _elapsed(call: CallSnapshot, now: float) -> str:
    if call.duration_s is not None:
        return format_duration(call.duration_s)
    start = call.started_ts or call.created_ts
    if start is None:
        return ""
    end = call.ended_ts or now
    return format_duration(max(0.0, end - start))


#: One row of the table: a call at a depth of the sub-agents' tree, or (``call`` None)
#: the one line a finished call's sub-agents collapse to.
Row = tuple[int, "CallSnapshot | None", str]


def _block(
    view: LiveView, call: CallSnapshot, children: dict[str, list[CallSnapshot]], expand: bool
) -> list[Row]:
    """A top-level call's rows: itself, then its sub-agents' calls indented under it
    while it is open (or with ``expand``); a finished call's collapse to one line."""
    rows: list[Row] = []

    def add(node: CallSnapshot, depth: int) -> None:
        rows.append((depth, node, ""))
        below = children.get(node.call_id)
        if not below:
            return
        if node.state.terminal and not expand:
            rows.append((depth + 1, None, _collapsed(view, node, below, children)))
            return
        for child in below:
            add(child, depth + 1)

    add(call, 0)
    return rows


def _collapsed(
    view: LiveView,
    call: CallSnapshot,
    below: list[CallSnapshot],
    children: dict[str, list[CallSnapshot]],
) -> str:
    """``researcher: 5 calls (4 completed, 1 failed)``: a finished call's sub-agents."""
    every: list[CallSnapshot] = []
    todo = list(below)
    while todo:
        node = todo.pop()
        every.append(node)
        todo += children.get(node.call_id, [])
    agents = [view.runs[r].agent for r in call.subruns if r in view.runs and view.runs[r].agent]
    counts = Counter(c.state.value for c in every)
    detail = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    who = ", ".join(dict.fromkeys(a for a in agents if a)) or "sub-agent"
    noun = "call" if len(every) == 1 else "calls"
    return f"{who}: {len(every)} {noun} ({detail})"


def _tree(view: LiveView) -> tuple[list[CallSnapshot], dict[str, list[CallSnapshot]]]:
    """The calls no other call of the view holds, and each call's sub-agents' calls."""
    calls = list(view.calls.values())
    known = {c.call_id for c in calls}
    children: dict[str, list[CallSnapshot]] = {}
    top: list[CallSnapshot] = []
    for call in calls:
        parent = call.parent_call_id
        if parent is not None and parent in known and parent != call.call_id:
            children.setdefault(parent, []).append(call)
        else:
            top.append(call)
    return top, children


def _pick(
    blocks: list[tuple[CallSnapshot, list[Row]]], rows: int
) -> tuple[list[Row], list[CallSnapshot], int]:
    """The rows to show in ``rows`` lines (open calls first, then the newest finished,
    newest first; a call with the rows of its sub-agents), the finished calls left out,
    and how many open ones are left out (only when even they do not fit). A row is kept
    for the count."""
    open_blocks = [b for b in blocks if not b[0].state.terminal]
    finished = [b for b in blocks if b[0].state.terminal]
    finished.reverse()
    total = sum(len(b[1]) for b in open_blocks + finished)
    if total <= rows:
        return [r for _, block in open_blocks + finished for r in block], [], 0
    room = rows - 1  # one line says what is not shown
    open_rows = sum(len(b[1]) for b in open_blocks)
    if open_rows >= room:  # the newest open calls
        shown: list[tuple[CallSnapshot, list[Row]]] = []
        used = 0
        for entry in reversed(open_blocks):
            if used + len(entry[1]) > room:
                break
            shown.insert(0, entry)
            used += len(entry[1])
        if not shown and open_blocks:  # a call with more sub-agents' rows than fit
            shown, used = [(open_blocks[-1][0], open_blocks[-1][1][:room])], room
        left = len(open_blocks) - len(shown)
        return [r for _, block in shown for r in block], [b[0] for b in finished], left
    kept: list[Row] = [r for _, block in open_blocks for r in block]
    hidden: list[CallSnapshot] = []
    budget = room - open_rows
    for call, call_rows in finished:
        if not hidden and len(call_rows) <= budget:
            kept += call_rows
            budget -= len(call_rows)
        else:
            hidden.append(call)
    return kept, hidden, 0


def _left_out(hidden: list[CallSnapshot], open_hidden: int) -> Text:
    parts: list[str] = []
    if open_hidden:
        parts.append(f"{open_hidden} more open")
    if hidden:
        counts = Counter(c.state.value for c in hidden)
        detail = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        parts.append(f"{len(hidden)} earlier finished ({detail})")
    return Text("  + " + " · ".join(parts), style="bright_black", no_wrap=True, overflow="ellipsis")


def render_view(
    view: LiveView,
    *,
    title: str = "toolstream",
    status: Text | str | None = None,
    width: int | None = None,
    height: int | None = None,
    expand: bool = False,
) -> RenderableType:
    """The view's newest run, the agent's newest words and the newest batch, and as many
    calls as ``height`` lines hold (all of them without a height). A sub-agent's calls
    are indented under the call that runs it; once that call ended they collapse to one
    line (all shown with ``expand``)."""
    now = time.time()
    lines: list[RenderableType] = []
    # The connection status first: a long title (a URL) must not push it off the line.
    head = Text(no_wrap=True, overflow="ellipsis")
    if status:
        head.append(status if isinstance(status, Text) else Text(status))
        head.append("  ")
    head.append(title, style="bold")
    lines.append(head)
    turns = [r for r in view.runs.values() if r.parent_call_id is None]
    for run in turns[-1:]:
        lines.append(
            Text(
                f"run {run.run_id}: {run.title or ''} [{run.state}]",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    said = [m for m in view.messages.values() if m.text.strip()]
    if said:  # the agent's newest words, on one line
        newest = said[-1].text.strip().splitlines()[-1]
        lines.append(Text(f"agent: {newest}", style="italic", no_wrap=True, overflow="ellipsis"))
    for batch in list(view.batches.values())[-1:]:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(batch.counts.items()))
        lines.append(
            Text(
                f"batch {batch.batch_id}: {batch.phase} ({counts})",
                style="blue",
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    narrow = width is not None and width < 60
    table = Table(
        box=box.SIMPLE_HEAD, expand=True, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0)
    )
    table.add_column("", width=1, no_wrap=True)
    table.add_column("tool", style="bold", no_wrap=True, max_width=_TOOL_WIDTH)
    table.add_column("state", no_wrap=True, width=11)
    if not narrow:
        table.add_column("time", justify="right", width=6, no_wrap=True)
    table.add_column("summary", ratio=1, no_wrap=True, overflow="ellipsis", min_width=10)

    top, children = _tree(view)
    blocks = [(call, _block(view, call, children, expand)) for call in top]
    # With a height, the last line stays free: a terminal scrolls when it is written.
    total = sum(len(rows) for _, rows in blocks)
    rows = total if height is None else max(height - len(lines) - _TABLE_LINES - 1, 2)
    shown, hidden, open_hidden = _pick(blocks, rows)
    for depth, call, collapsed in shown:
        indent = "  " * (depth - 1) + "↳ " if depth else ""
        if call is None:
            cells: list[RenderableType] = [Text(""), Text(indent + "…", style="bright_black")]
            cells.append(Text("collapsed", style="bright_black"))
            if not narrow:
                cells.append("")
            cells.append(Text(collapsed, style="bright_black"))
            table.add_row(*cells)
            continue
        cells = [_icon(call), indent + call.tool, _state(call)]
        if not narrow:
            cells.append(_elapsed(call, now))
        cells.append(_detail(call))
        table.add_row(*cells)
    parts: list[RenderableType] = [*lines, table]
    if hidden or open_hidden:
        parts.append(_left_out(hidden, open_hidden))
    return Group(*parts)


def _status_text(status: object) -> Text:
    state = getattr(status, "state", "")
    style = {"connected": "green", "ended": "bright_black"}.get(state, "yellow")
    return Text(f"● {status}", style=style)


class LiveRenderer:
    """Redraws a view at most ``fps`` times a second (rich ``Live``), fitted to the
    terminal. ``status`` (optional) returns the connection status to show."""

    def __init__(
        self,
        view: LiveView,
        *,
        title: str,
        console: Console | None = None,
        fps: float = 10,
        status: Callable[[], object] | None = None,
        expand: bool = False,
    ) -> None:
        from rich.live import Live

        self._view = view
        self._title = title
        self._console = console or Console()
        self._status = status
        self._expand = expand
        self._live = Live(console=self._console, auto_refresh=False, transient=False)
        self._interval = 1.0 / fps
        self._last = 0.0
        self.render: Callable[[], RenderableType] = self._render

    def _render(self) -> RenderableType:
        size = self._console.size
        return render_view(
            self._view,
            title=self._title,
            status=_status_text(self._status()) if self._status is not None else None,
            width=size.width,
            height=size.height,
            expand=self._expand,
        )

    def __enter__(self) -> LiveRenderer:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.update(self.render(), refresh=True)
        self._live.__exit__(None, None, None)

    def refresh(self, *, force: bool = False) -> None:
        """Redraw if the last redraw is older than the frame interval."""
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            self._last = now
            self._live.update(self.render(), refresh=True)
