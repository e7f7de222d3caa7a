// The demo's useStream page: LangGraph's own useStream core (CustomStreamOrchestrator with
// FetchStreamTransport, what useStream runs with a custom transport) talking to
// toolstream's ChatApp(dialect="langgraph") at /api/langgraph. The thread is the
// orchestrator's state: the user's and the agent's messages from `values` and
// `messages`, each call of the turn a card (its result from the thread's tool message,
// its progress from `tools` events); `__interrupt__` shows Approve / Deny, answered with
// command.resume {<interrupt id>: {approved}}; Stop is POST /api/langgraph/<thread>/stop.
// A sub-agent's calls are not the thread's messages: they come only as `tools` events,
// shown inside the card of the turn's call that was running when they started.
import { CustomStreamOrchestrator, FetchStreamTransport } from '@langchain/langgraph-sdk/ui';

import { $, el, short } from './dom.js';

const API = '/api/langgraph';
const STORE = 'toolstream-demo-usestream';

// The thread id is all a reload keeps: FetchStreamTransport cannot rejoin a stream, so
// the thread comes back with the next response's first `values`.
function threadOf() {
  const saved = localStorage.getItem(STORE);
  if (saved) return saved;
  const id = `thread-${crypto.randomUUID()}`;
  localStorage.setItem(STORE, id);
  return id;
}

const threadId = threadOf();
const reloaded = localStorage.getItem(`${STORE}:used`) === threadId;
// toolCallId -> what its `tools` events said: {name, state, progress, error, running (the
// calls running when it started)}; a sub-agent's call that asked first: {name, args, state}
const calls = new Map();
let stopped = false; // the person stopped the turn (its interrupts are void)
let sending = false; // a submit is under way (the orchestrator's isLoading lags the click)

const running = () => [...calls].filter(([, c]) => c.state === 'running').map(([id]) => id);

const stream = new CustomStreamOrchestrator({
  transport: new FetchStreamTransport({ apiUrl: API }),
  threadId,
  onToolEvent: (e) => {
    const seen = calls.get(e.toolCallId) ?? { name: e.name, progress: null, running: running() };
    if (e.event === 'on_tool_start') {
      seen.state = 'running';
      seen.args = e.input;
      seen.running = running();
    } else if (e.event === 'on_tool_event' && e.data?.progress) seen.progress = e.data.progress;
    else if (e.event === 'on_tool_end') seen.state = 'completed';
    else if (e.event === 'on_tool_error') {
      seen.state = /^Cancelled/.test(e.error ?? '') ? 'cancelled' : /^Denied/.test(e.error ?? '') ? 'denied' : 'failed';
      seen.error = e.error;
    }
    calls.set(e.toolCallId, seen);
    render();
  },
});
stream.subscribe(() => render());

// -- what the thread says -------------------------------------------------------------------

const typeOf = (m) => m.type ?? m.getType?.();
const textOf = (content) => (typeof content === 'string' ? content
  : Array.isArray(content) ? content.map((b) => (typeof b === 'string' ? b : b?.text ?? '')).join('') : '');

const WORDS = {
  pending: 'pending',
  running: 'running',
  awaiting_approval: 'needs your approval',
  completed: 'completed',
  failed: 'failed',
  denied: 'denied',
  cancelled: 'cancelled',
};

/** A call of the turn: ended as its tool message says, else as its events say. */
function stateOf(toolCall, interrupt) {
  const result = toolCall.result;
  if (result) {
    const text = textOf(result.content);
    if (result.status !== 'error') return 'completed';
    return /^Denied/.test(text) ? 'denied' : /^Cancelled/.test(text) ? 'cancelled' : 'failed';
  }
  if (interrupt) return 'awaiting_approval';
  return calls.get(toolCall.id)?.state ?? (toolCall.state === 'completed' ? 'completed' : 'pending');
}

// The interrupts waiting, by call id (each value: {approval_id, call_id, tool, args, reason}).
function interruptsByCall() {
  const out = new Map();
  if (stopped && !stream.isLoading) return out;
  for (const i of stream.interrupts) if (i.id && i.value?.call_id) out.set(i.value.call_id, i);
  return out;
}

// -- rendering ------------------------------------------------------------------------------

function approvalView(interrupt) {
  const { id } = interrupt;
  const decide = (approved) => () => resume(interrupt, approved);
  return el('div', { class: 'approval' },
    el('span', { class: 'ask' }, interrupt.value.reason ?? 'Approve this call?'),
    el('button', { class: 'approve', type: 'button', 'data-key': `approve:${id}`, disabled: sending, onclick: decide(true) }, 'Approve'),
    el('button', { class: 'deny', type: 'button', 'data-key': `deny:${id}`, disabled: sending, onclick: decide(false) }, 'Deny'),
  );
}

function progressView(seen) {
  const p = seen?.state === 'running' ? seen.progress : null;
  if (!p) return [];
  return [
    el('div', { class: 'note' }, p.message ?? ''),
    typeof p.progress === 'number' ? el('div', { class: 'bar' }, el('i', { style: `width:${Math.round(p.progress * 100)}%` })) : null,
  ];
}

// A card: {id, name, args, state, result?, error?}, with its approval and the sub-agent's
// calls shown inside it.
function card(call, interrupt, nested = []) {
  return el('div', { class: 'card chat-card', 'data-call': call.id, 'data-tool': call.name, 'data-state': call.state },
    el('div', { class: 'top' }, el('span', { class: 'tool' }, call.name), el('span', { class: 'badge' }, WORDS[call.state] ?? call.state)),
    call.args !== undefined ? el('div', { class: 'summary input' }, short(call.args, 200)) : null,
    progressView(calls.get(call.id)),
    interrupt ? approvalView(interrupt) : null,
    call.result ? el('pre', { class: 'output' }, short(call.result)) : null,
    call.error ? el('div', { class: 'error' }, call.error) : null,
    nested.length ? el('div', { class: 'subruns' }, el('section', { class: 'subrun' },
      el('div', { class: 'muted sub-label' }, 'a sub-agent’s calls'),
      el('div', { class: 'sub-body' }, nested))) : null,
  );
}

function ownCard(toolCall, interrupt, nested) {
  const text = toolCall.result ? textOf(toolCall.result.content) : undefined;
  const ended = toolCall.result?.status === 'error';
  return card({
    id: toolCall.id,
    name: toolCall.call.name,
    args: toolCall.call.args,
    state: stateOf(toolCall, interrupt),
    result: ended ? undefined : text,
    error: ended ? text : undefined,
  }, interrupt, nested);
}

function view() {
  const waiting = interruptsByCall();
  const toolCalls = stream.toolCalls;
  const own = new Set(toolCalls.map((t) => t.id));
  // A call the thread's messages do not hold is a sub-agent's (useStream gets only its
  // `tools` events, or its interrupt): shown inside the turn's call that ran when it
  // started, or asked.
  for (const [id, interrupt] of waiting) {
    if (!own.has(id) && !calls.has(id)) {
      calls.set(id, { name: interrupt.value.tool, args: interrupt.value.args, state: 'pending', running: running() });
    }
  }
  const nested = new Map(); // the turn's call id (or null) -> the sub-agent's cards in it
  for (const [id, seen] of calls) {
    if (own.has(id)) continue;
    const parent = seen.running.filter((r) => own.has(r)).at(-1) ?? null;
    const interrupt = waiting.get(id);
    const shown = card({ id, name: seen.name, args: seen.args, state: interrupt ? 'awaiting_approval' : seen.state, error: seen.error }, interrupt);
    nested.set(parent, [...(nested.get(parent) ?? []), shown]);
  }

  // The thread: the user's messages, and the agent's messages and calls between them.
  const blocks = [];
  let agent = null;
  for (const message of stream.messages) {
    const type = typeOf(message);
    if (type === 'human') {
      agent = null;
      blocks.push(el('div', { class: 'chat-message user', 'data-id': message.id, 'data-role': 'user' },
        el('div', { class: 'chat-who muted' }, 'you'),
        el('div', { class: 'chat-body' }, el('div', { class: 'chat-text' }, textOf(message.content)))));
      continue;
    }
    if (type !== 'ai') continue; // a tool message is its call's card
    if (!agent) {
      agent = el('div', { class: 'chat-body' });
      blocks.push(el('div', { class: 'chat-message assistant', 'data-role': 'assistant' },
        el('div', { class: 'chat-who muted' }, 'agent'), agent));
    }
    const reasoning = message.additional_kwargs?.reasoning_content;
    if (reasoning) agent.append(el('details', { class: 'chat-reasoning' }, el('summary', {}, 'reasoning'), reasoning));
    const text = textOf(message.content);
    if (text) agent.append(el('div', { class: 'chat-text', 'data-id': message.id }, text));
    for (const toolCall of toolCalls.filter((t) => t.aiMessage.id === message.id)) {
      agent.append(ownCard(toolCall, waiting.get(toolCall.id), nested.get(toolCall.id) ?? []));
    }
  }
  // A sub-agent's call that started while none of the turn's calls ran.
  if (nested.has(null)) agent?.append(...nested.get(null));
  return blocks;
}

function statusOf() {
  const error = stream.error;
  if (error) return { text: `error: ${error.name}: ${error.message}`, kind: 'down' };
  if (stream.isLoading || sending) return { text: 'streaming', kind: 'live' };
  if (stopped) return { text: 'stopped', kind: '' };
  if (interruptsByCall().size) return { text: 'waiting for your approval', kind: 'waiting' };
  return { text: 'ready', kind: '' };
}

let scheduled = false;
function render() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    const focused = document.activeElement?.dataset?.key;
    const blocks = view();
    if (!blocks.length && reloaded) {
      blocks.push(el('p', { class: 'muted', id: 'reloaded' },
        'This thread’s messages come back with your next message (useStream’s fetch transport cannot rejoin a stream).'));
    }
    $('#messages').replaceChildren(...blocks);
    if (focused) document.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
    const shown = statusOf();
    const busy = stream.isLoading || sending;
    $('#status').textContent = shown.text;
    $('#status').className = `status ${shown.kind}`;
    $('#send').disabled = busy;
    $('#stop').disabled = !(busy || shown.kind === 'waiting');
    $('#thread-id').textContent = threadId;
    $('#thread-id').title = threadId;
    window.usestreamView = {
      threadId,
      status: shown.text,
      isLoading: stream.isLoading,
      error: stream.error ? { name: stream.error.name, message: stream.error.message } : null,
      messages: stream.messages.map((m) => ({ type: typeOf(m), id: m.id, content: textOf(m.content) })),
      toolCalls: stream.toolCalls.map((t) => ({ id: t.id, name: t.call.name, state: t.state, result: t.result ? textOf(t.result.content) : null })),
      interrupts: stream.interrupts,
      tools: Object.fromEntries(calls),
    };
  });
}

// -- controls -------------------------------------------------------------------------------

// The thread as the page shows it (kept while the next response starts: the orchestrator
// starts each submit from its initial values).
const current = () => ({ messages: stream.values.messages ?? [] });

async function submit(values, options) {
  sending = true;
  stopped = false;
  render();
  try {
    await stream.submit(values, options);
  } finally {
    sending = false;
    render();
  }
}

function resume(interrupt, approved) {
  const seen = calls.get(interrupt.value.call_id);
  if (seen && !approved) seen.state = 'denied'; // a sub-agent's call: it will never start
  const interruptId = interrupt.id;
  const decision = approved ? { approved } : { approved, reason: 'denied on the demo page' };
  return submit(null, { command: { resume: { [interruptId]: decision } }, optimisticValues: current() });
}

$('#composer').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('#prompt').value.trim();
  if (!text) return;
  $('#prompt').value = '';
  localStorage.setItem(`${STORE}:used`, threadId);
  const mine = { type: 'human', content: text, id: `human-${crypto.randomUUID()}` };
  const optimistic = { messages: [...current().messages, mine] };
  await submit({ messages: [{ type: 'human', content: text, id: mine.id }] }, { optimisticValues: optimistic });
});

// Stopping the turn is a request of its own: stream.stop() only drops the connection.
$('#stop').addEventListener('click', async () => {
  stopped = true;
  await fetch(`${API}/${encodeURIComponent(threadId)}/stop`, { method: 'POST' });
  render();
});

$('#new-thread').addEventListener('click', () => {
  localStorage.removeItem(STORE);
  localStorage.removeItem(`${STORE}:used`);
  location.reload();
});

window.stream = stream;
render();
