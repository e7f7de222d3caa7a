// The AI SDK's own chat client (AbstractChat + DefaultChatTransport: what useChat runs in
// a browser) against a toolstream ChatApp, for one AI SDK generation.
//
// argv: <api url> <generation 6|7> <scenario> [<scenario> ...]
// Runs the scenarios in sequence, each on a chat of its own, and prints one JSON document:
// {"generation", "version", "results": {<scenario>: {"ok", "error"?, "chat", "status",
//   "chatError", "steps", "errors" (onError), "data" (onData parts), "messages" (the
//   chat's UI messages),
//   "responses" (every response read, its chunks validated: ui_stream.mjs)}}}
import { readFileSync } from 'node:fs';

import { readResponse, recordingFetch, sentBody, settled } from './ui_stream.mjs';

const [api, generation, ...scenarios] = process.argv.slice(2);
const PACKAGES = { 6: 'ai6', 7: 'ai' };
const pkg = PACKAGES[generation];
if (!pkg) throw new Error(`generation must be 6 or 7, not ${generation}`);
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses, uiMessageChunkSchema } = await import(pkg);
const version = JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;
const schema = uiMessageChunkSchema();

// What the user types for each scenario: the canonical script's keyword picks the turn.
const PROMPTS = {
  weather: 'What is the weather in Paris?',
  build: 'Run the build.',
  email: 'Email the team, please.',
  // The approved call then runs 3 s (not 0.5 s): a cut and a resume land while it runs.
  emailSlowly: 'Email the team slowly, please.',
  story: 'Tell me a story.',
  wait: 'Please wait for it.',
  crash: 'Make it crash.',
};

class State {
  constructor(messages = []) {
    this.status = 'ready';
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage(m) { this.messages = this.messages.concat([m]); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; }
  snapshot(x) { return structuredClone(x); }
}

class Chat extends AbstractChat {
  constructor({ messages, ...init }) { super({ ...init, state: new State(messages) }); }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const toolParts = (m) => (m?.parts ?? []).filter((p) => p.type.startsWith('tool-'));
const text = (m) => (m?.parts ?? []).filter((p) => p.type === 'text').map((p) => p.text).join('');
const last = (chat) => chat.messages[chat.messages.length - 1];
const idle = (chat) => chat.status === 'ready' || chat.status === 'error';

// One scenario's chat(s): every chat it makes shares the id and the records.
class Scenario {
  constructor(name, n) {
    this.id = `chat-ai${generation}-${name}-${process.pid}-${n}`;
    this.steps = [];
    this.errors = [];
    this.data = [];
    this.responses = [];
    this.chat = null;
  }

  open(messages = []) {
    this.chat = new Chat({
      id: this.id,
      messages,
      transport: new DefaultChatTransport({ api, fetch: recordingFetch(schema, this.responses) }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      onError: (e) => this.errors.push(String(e?.message ?? e)),
      onData: (part) => this.data.push(part),
    });
    return this.chat;
  }

  async until(what, check, ms = 15000) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (check()) return;
      await sleep(10);
    }
    const seen = this.responses.map((r) => `${r.method} ${r.status} ${r.end}`).join(', ');
    throw new Error(`timed out waiting for ${what}; status ${this.chat?.status}; responses [${seen}]; messages ${JSON.stringify(this.chat?.messages).slice(0, 1500)}`);
  }

  // Until the chat is idle after `count` responses, every one of them read to its end.
  async answered(what, count) {
    await this.until(what, () => this.responses.length >= count && this.responses.every((r) => r.end !== 'open') && idle(this.chat));
    await settled();
  }

  async asked() {
    await this.answered('an approval request', 1);
    const part = toolParts(last(this.chat)).find((p) => p.state === 'approval-requested');
    if (!part) throw new Error(`no approval was requested: ${JSON.stringify(last(this.chat))}`);
    this.steps.push({ step: 'asked', messageId: last(this.chat).id, part });
    return part;
  }

  async decide(part, approved) {
    await this.chat.addToolApprovalResponse({ id: part.approval.id, approved, reason: approved ? undefined : 'not now' });
  }

  userMessages() {
    return this.chat.messages.filter((m) => m.role === 'user');
  }

  result() {
    const chat = this.chat;
    return {
      chat: this.id,
      status: chat?.status ?? null,
      chatError: chat?.error ? String(chat.error.message ?? chat.error) : null,
      steps: this.steps,
      errors: this.errors,
      data: this.data,
      messages: chat?.messages ?? [],
      responses: this.responses,
    };
  }
}

const SCENARIOS = {
  async weather(s) {
    await s.open().sendMessage({ text: PROMPTS.weather });
    await s.answered('the answer', 1);
  },

  async build(s) {
    await s.open().sendMessage({ text: PROMPTS.build });
    await s.answered('the answer', 1);
  },

  async approve(s) { await approval(s, true); },
  async deny(s) { await approval(s, false); },

  async reload(s) {
    const chat = s.open();
    const sending = chat.sendMessage({ text: PROMPTS.story });
    await s.until('some text', () => last(chat)?.role === 'assistant' && text(last(chat)).length > 10);
    s.steps.push({ step: 'cut', text: text(last(chat)) });
    await chat.stop(); // the connection goes away; the turn goes on
    await sending;
    // An app restoring what it stored: the chat id and the user's message.
    await s.open(s.userMessages()).resumeStream();
    await s.answered('the resumed answer', 2);
    s.steps.push({ step: 'resumed', text: text(last(s.chat)) });
  },

  async 'reload-after-approval'(s) {
    const chat = s.open();
    await chat.sendMessage({ text: PROMPTS.emailSlowly });
    const part = await s.asked();
    await s.decide(part, true);
    // The continuation has begun: the approved call runs (3 s). Cut it there.
    await s.until('the continuation', () => s.responses.length >= 2 && s.responses[1].status !== null);
    s.steps.push({ step: 'cut', parts: last(chat).parts });
    await chat.stop();
    await settled();
    await s.open(s.userMessages()).resumeStream();
    await s.answered('the resumed answer', 3);
  },

  async stop(s) {
    const chat = s.open();
    const sending = chat.sendMessage({ text: PROMPTS.wait });
    await s.until('the sleep call', () => toolParts(last(chat)).some((p) => p.type === 'tool-sleep'));
    await chat.stop();
    await sending;
    const stopped = await fetch(`${api}/${encodeURIComponent(s.id)}/stop`, { method: 'POST' });
    s.steps.push({ step: 'stop', status: stopped.status, body: await stopped.text() });
    await chat.resumeStream();
    await s.answered('the resume', 2);
  },

  async crash(s) {
    await s.open().sendMessage({ text: PROMPTS.crash });
    await s.answered('the error', 1);
  },

  async retry(s) {
    await approval(s, true);
    // The continuation POST again, as a client retrying after a dropped connection.
    const continuation = s.responses.find((r, i) => i > 0 && r.method === 'POST');
    const body = sentBody(continuation);
    const entry = { method: 'POST', path: continuation.path, retry: true, status: null, chunks: [], refused: [], end: 'open' };
    s.responses.push(entry);
    const response = await fetch(api, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    await readResponse(response, schema, entry);
  },
};

async function approval(s, approved) {
  await s.open().sendMessage({ text: PROMPTS.email });
  const part = await s.asked();
  await s.decide(part, approved);
  await s.answered('the continuation', 2);
  s.steps.push({ step: 'decided', messageId: last(s.chat).id });
}

const results = {};
for (const [n, name] of scenarios.entries()) {
  const s = new Scenario(name, n);
  try {
    const run = SCENARIOS[name];
    if (!run) throw new Error(`unknown scenario ${name}`);
    await run(s);
    await settled();
    results[name] = { ok: true, ...s.result() };
  } catch (e) {
    try { await s.chat?.stop(); } catch { /* already failed */ }
    results[name] = { ok: false, error: String(e?.stack ?? e), ...s.result() };
  }
}
process.stdout.write(JSON.stringify({ generation, version, results }));
process.exit(0);
