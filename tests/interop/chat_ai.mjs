// The AI SDK's own chat client (AbstractChat + DefaultChatTransport, what useChat runs in
// a browser) against a toolstream ChatApp. argv: <api url> <scenario>; prints JSON:
// {"ok": true, "steps": [...], "messages": [...]} or {"ok": false, "error": "..."}.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from 'ai';

const [api, scenario] = process.argv.slice(2);

class State {
  constructor() {
    this.status = 'ready';
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(m) { this.messages = this.messages.concat([m]); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; }
  snapshot(x) { return structuredClone(x); }
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new State() }); }
}

const errors = [];
const chat = new Chat({
  id: `chat-${scenario}-${process.pid}`,
  transport: new DefaultChatTransport({ api }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (e) => errors.push(String(e?.message ?? e)),
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return;
    await sleep(10);
  }
  throw new Error(`timed out waiting for ${what}; status ${chat.status}; messages ${JSON.stringify(chat.messages).slice(0, 2000)}`);
}

const last = () => chat.messages[chat.messages.length - 1];
const toolParts = (m) => (m?.parts ?? []).filter((p) => p.type.startsWith('tool-'));
const text = (m) => (m?.parts ?? []).filter((p) => p.type === 'text').map((p) => p.text).join('');
const steps = [];

function shape(m) {
  return {
    id: m.id,
    role: m.role,
    text: text(m),
    parts: m.parts.filter((p) => p.type !== 'step-start').map((p) => ({
      type: p.type, state: p.state ?? null, toolCallId: p.toolCallId ?? null,
      output: p.output ?? null, approval: p.approval ?? null, text: p.text ?? null,
    })),
  };
}

async function approveOnce(approved) {
  await until('an approval request', () => chat.status === 'ready' && toolParts(last()).some((p) => p.state === 'approval-requested'));
  const part = toolParts(last()).find((p) => p.state === 'approval-requested');
  steps.push({ step: 'asked', messageId: last().id, text: text(last()) });
  await chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'not now' });
  const ended = approved ? 'output-available' : 'output-denied';
  await until(`the call to end ${ended}`, () => chat.status === 'ready' && toolParts(last()).every((p) => p.state === ended) && /Sent|Not sent/.test(text(last())));
  steps.push({ step: 'decided', messageId: last().id, text: text(last()) });
}

try {
  if (scenario === 'approve-then-deny') {
    await chat.sendMessage({ text: 'Email the team, please.' });
    await approveOnce(true);
    await chat.sendMessage({ text: 'Email them again.' });
    await approveOnce(false);
  } else if (scenario === 'resume') {
    const sending = chat.sendMessage({ text: 'Tell me a long story.' });
    await until('some text', () => text(last()).length > 10 && last().role === 'assistant');
    steps.push({ step: 'cut', text: text(last()) });
    await chat.stop();  // the connection goes away; the turn must go on
    await sending;
    await sleep(300);
    await chat.resumeStream();
    await until('the whole message', () => chat.status === 'ready' && /The end\./.test(text(last())));
    steps.push({ step: 'resumed', text: text(last()) });
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  process.stdout.write(JSON.stringify({ ok: true, chat: chat.id, steps, errors, messages: chat.messages.map(shape) }));
} catch (e) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(e?.stack ?? e), steps, errors, messages: chat.messages.map(shape) }));
}
process.exit(0);
