// The demo's chat page: the AI SDK's own chat client (AbstractChat with
// DefaultChatTransport, what useChat runs) talking to toolstream's ChatApp at /api/chat.
// Messages stream in as text, reasoning and tool cards; a call that needs a person shows
// Approve / Deny; a reload mid-turn resumes the turn (GET /api/chat/<id>/stream). A tool
// that is itself an agent carries the sub-agent's message as its output (output.parts):
// its text and cards are shown inside the tool's card, open while it runs, folded to one
// line once it ended; a sub-agent's call that needs a person is decided through
// POST /api/chat/<id>/decide (the AI SDK's client answers only its message's own parts).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';

import { $, el, short } from './dom.js';

const API = '/api/chat';
const STORE = 'toolstream-demo-chat';

// -- the chat's state: kept in the page, saved so that a reload can resume -----------------

class PageState {
  constructor(messages) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
    this.listeners = new Set();
  }
  changed() { for (const fn of this.listeners) fn(); }
  pushMessage(m) { this.messages = this.messages.concat([m]); this.changed(); }
  popMessage() { this.messages = this.messages.slice(0, -1); this.changed(); }
  replaceMessage(i, m) {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
    this.changed();
  }
  snapshot(x) { return structuredClone(x); }
}

class PageChat extends AbstractChat {
  constructor({ state, ...init }) {
    super({ ...init, state });
    this.pageState = state;
  }
  setStatus(update) {
    super.setStatus(update);
    this.pageState.changed();
  }
}

function load() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORE) || 'null');
    if (saved && typeof saved.id === 'string' && Array.isArray(saved.messages)) return saved;
  } catch { /* a fresh chat */ }
  return { id: `chat-${crypto.randomUUID()}`, messages: [] };
}

const saved = load();
const state = new PageState(saved.messages);
const progress = new Map(); // toolCallId -> the newest data-tool-progress
const folded = new Map(); // toolCallId -> the reader's choice for its sub-agent: open (true) or folded
const deciding = new Map(); // a sub-agent's approval id -> 'sending', 'sent' or what went wrong

const chat = new PageChat({
  id: saved.id,
  state,
  transport: new DefaultChatTransport({ api: API }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onData: (part) => {
    if (part.type === 'data-tool-progress' && part.data?.toolCallId) {
      progress.set(part.data.toolCallId, part.data);
      render();
    }
  },
  onError: (error) => { lastError = String(error?.message ?? error); render(); },
});
let lastError = '';

state.listeners.add(() => {
  sessionStorage.setItem(STORE, JSON.stringify({ id: chat.id, messages: state.messages }));
  render();
});

// -- rendering ------------------------------------------------------------------------------

const log = $('#messages');

const STATES = {
  'input-streaming': 'receiving input',
  'input-available': 'running',
  'approval-requested': 'needs your approval',
  'approval-responded': 'decided',
  'output-available': 'completed',
  'output-error': 'failed',
  'output-denied': 'denied',
};

const isTool = (part) => part.type.startsWith('tool-') || part.type === 'dynamic-tool';

// The sub-agent's message a tool's output carries (the AI SDK's sub-agent pattern).
function subagentOf(part) {
  const out = part.output;
  return out && typeof out === 'object' && Array.isArray(out.parts) && Array.isArray(out.metadata?.subagents)
    ? out : null;
}

// Every tool part of a sub-agent's message, its own sub-agents' included.
function toolsIn(parts) {
  const found = [];
  for (const part of parts) {
    if (!isTool(part)) continue;
    found.push(part);
    const sub = subagentOf(part);
    if (sub) found.push(...toolsIn(sub.parts));
  }
  return found;
}

function counts(parts) {
  const tools = toolsIn(parts);
  const by = {};
  for (const p of tools) {
    const s = p.state === 'output-available' && p.preliminary ? 'input-available' : p.state;
    by[s] = (by[s] ?? 0) + 1;
  }
  const said = [`${tools.length} call${tools.length === 1 ? '' : 's'}`];
  for (const [s, word] of [['input-available', 'running'], ['approval-requested', 'waiting for you'],
    ['output-error', 'failed'], ['output-denied', 'denied']]) {
    if (by[s]) said.push(`${by[s]} ${word}`);
  }
  return said.join(' · ');
}

// A sub-agent's approval: decided on the chat's decision endpoint, not in the chat protocol.
function decideNested(approvalId, approved) {
  return async () => {
    deciding.set(approvalId, 'sending');
    render();
    try {
      const response = await fetch(`${API}/${encodeURIComponent(chat.id)}/decide`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ approval_id: approvalId, approved, reason: approved ? undefined : 'denied on the demo page' }),
      });
      if (response.ok) deciding.set(approvalId, 'sent');
      else {
        const body = await response.json().catch(() => ({}));
        deciding.set(approvalId, body.error ?? `refused (${response.status})`);
      }
    } catch (error) {
      deciding.set(approvalId, String(error?.message ?? error));
    }
    render();
  };
}

function subagentView(part, sub) {
  const id = part.toolCallId;
  const running = part.state !== 'output-available' || part.preliminary === true;
  const open = folded.has(id) ? folded.get(id) : running;
  const agents = sub.metadata.subagents.map((s) => s.agent ?? 'sub-agent').join(', ');
  const body = el('div', { class: 'sub-body', id: `sub-${id}`, hidden: !open }, partsView(sub.parts, true));
  return el('section', { class: 'subrun', 'data-run': sub.id, 'data-state': running ? 'running' : 'completed' },
    el('button', {
      type: 'button',
      class: 'sub-toggle',
      'data-key': `sub:${id}`,
      'aria-expanded': open ? 'true' : 'false',
      'aria-controls': `sub-${id}`,
      onclick: () => { folded.set(id, !open); render(); },
    },
      el('span', { class: 'sub-caret', 'aria-hidden': 'true' }),
      el('span', { class: 'sub-agent' }, agents),
      el('span', { class: 'badge sub-state' }, running ? 'running' : 'completed'),
      el('span', { class: 'sub-counts' }, counts(sub.parts)),
    ),
    body,
  );
}

function toolCard(part, nested = false) {
  const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
  const running = progress.get(part.toolCallId);
  const state = part.state === 'output-available' && part.preliminary ? 'input-available' : part.state;
  const failed = part.state === 'output-error';
  const cancelled = failed && /^Cancelled/.test(part.errorText ?? '');
  const shown = cancelled ? 'cancelled' : STATES[state] ?? state;
  const card = el('div', {
    class: 'card chat-card',
    'data-call': part.toolCallId,
    'data-tool': name,
    'data-state': cancelled ? 'cancelled' : state,
  },
    el('div', { class: 'top' },
      el('span', { class: 'tool' }, name),
      el('span', { class: 'badge' }, shown),
    ),
  );
  if (part.input !== undefined) card.append(el('div', { class: 'summary input' }, short(part.input, 200)));
  if (running && (state === 'input-available' || part.preliminary)) {
    const fraction = typeof running.fraction === 'number' ? running.fraction : null;
    card.append(el('div', { class: 'note' }, running.message ?? running.state ?? ''));
    if (fraction != null) card.append(el('div', { class: 'bar' }, el('i', { style: `width:${Math.round(fraction * 100)}%` })));
  }
  if (part.state === 'approval-requested' && nested) {
    const id = part.approval.id;
    const sent = deciding.get(id);
    const busy = sent === 'sending' || sent === 'sent';
    card.append(el('div', { class: 'approval' },
      el('span', { class: 'ask' }, part.approval?.requestReason ?? 'Approve this call?'),
      el('button', { class: 'approve', type: 'button', 'data-key': `approve:${id}`, disabled: busy, onclick: decideNested(id, true) }, 'Approve'),
      el('button', { class: 'deny', type: 'button', 'data-key': `deny:${id}`, disabled: busy, onclick: decideNested(id, false) }, 'Deny'),
      busy || !sent ? null : el('span', { class: 'problem' }, sent),
    ));
  } else if (part.state === 'approval-requested') {
    const decide = (approved) => async () => {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'denied on the demo page' });
    };
    card.append(el('div', { class: 'approval' },
      el('span', { class: 'ask' }, part.approval?.requestReason ?? 'Approve this call?'),
      el('button', { class: 'approve', onclick: decide(true) }, 'Approve'),
      el('button', { class: 'deny', onclick: decide(false) }, 'Deny'),
    ));
  }
  const sub = subagentOf(part);
  if (sub) {
    // The tool's own result, once it ended, is beside the sub-agent's message.
    if (!part.preliminary && sub.metadata.result !== undefined) card.append(el('pre', { class: 'output' }, short(sub.metadata.result)));
    card.append(el('div', { class: 'subruns' }, subagentView(part, sub)));
  } else if (part.state === 'output-available' && part.output !== undefined) {
    card.append(el('pre', { class: 'output' }, short(part.output)));
  }
  if (failed) card.append(el('div', { class: 'error' }, part.errorText));
  if (part.state === 'output-denied') card.append(el('div', { class: 'error' }, 'Denied: the call never ran'));
  return card;
}

// A message's parts (nested: a sub-agent's, inside its tool's card).
function partsView(parts, nested = false) {
  const shown = [];
  for (const part of parts) {
    if (part.type === 'text') {
      shown.push(el('div', { class: 'chat-text', 'data-state': part.state ?? 'done' }, part.text));
    } else if (part.type === 'reasoning') {
      shown.push(el('details', { class: 'chat-reasoning' }, el('summary', {}, 'reasoning'), part.text));
    } else if (isTool(part)) {
      shown.push(toolCard(part, nested));
    }
  }
  return shown;
}

function messageView(message) {
  const body = el('div', { class: 'chat-body' }, partsView(message.parts));
  return el('div', { class: `chat-message ${message.role}`, 'data-id': message.id, 'data-role': message.role },
    el('div', { class: 'chat-who muted' }, message.role === 'user' ? 'you' : 'agent'),
    body,
  );
}

// The response ended at an approval request, or a sub-agent's call waits for one: the
// turn is not over, it waits for a click.
function waitingForApproval() {
  const last = state.messages[state.messages.length - 1];
  if (last?.role !== 'assistant') return false;
  const nested = last.parts.filter(isTool).map(subagentOf).filter(Boolean);
  if (nested.some((sub) => toolsIn(sub.parts).some((p) => p.state === 'approval-requested' && !/^(sending|sent)$/.test(deciding.get(p.approval?.id) ?? '')))) {
    return chat.status !== 'error';
  }
  return chat.status === 'ready' && last.parts.some((p) => p.state === 'approval-requested');
}

function statusOf() {
  if (lastError) return { text: `error: ${lastError}`, kind: 'down' };
  if (waitingForApproval()) return { text: 'waiting for your approval', kind: 'waiting' };
  return { text: chat.status, kind: chat.status === 'ready' ? '' : 'live' };
}

let scheduled = false;
function render() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    // Each frame redraws the messages: the focused control is found again by its key.
    const focused = document.activeElement?.dataset?.key;
    log.replaceChildren(...state.messages.map(messageView));
    if (focused) document.querySelector(`[data-key="${CSS.escape(focused)}"]`)?.focus();
    const shown = statusOf();
    $('#status').textContent = shown.text;
    $('#status').className = `status ${shown.kind}`;
    $('#send').disabled = chat.status === 'submitted' || chat.status === 'streaming';
    $('#stop').disabled = !(chat.status === 'submitted' || chat.status === 'streaming');
    $('#chat-id').textContent = chat.id;
    $('#chat-id').title = chat.id; // the whole id, where the header shortens it
    window.chatView = { status: chat.status, shown: shown.text, error: lastError, messages: state.messages };
  });
}

// -- controls -------------------------------------------------------------------------------

$('#composer').addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = $('#prompt').value.trim();
  if (!text) return;
  $('#prompt').value = '';
  lastError = '';
  await chat.sendMessage({ text });
});

// Stopping the turn is a request of its own: closing the response never stops the agent.
$('#stop').addEventListener('click', async () => {
  await fetch(`${API}/${encodeURIComponent(chat.id)}/stop`, { method: 'POST' });
});

$('#new-chat').addEventListener('click', () => {
  sessionStorage.removeItem(STORE);
  location.reload();
});

window.chat = chat;
render();
// A turn that was streaming when the page went away goes on: resume it.
chat.resumeStream();
