// LangGraph's useStream core (CustomStreamOrchestrator + FetchStreamTransport from
// @langchain/langgraph-sdk/ui, what useStream runs with a custom transport) against a
// toolstream ChatApp(dialect="langgraph").
//
// argv: <url> <scenario> [<scenario> ...]
// Runs the scenarios in sequence, each on a thread of its own, and prints one JSON
// document: {"version", "results": {<scenario>: {"ok", "error"?, "thread", "steps",
//   "responses": [{"body" (what the transport posted), "status", "events": [[event,
//   data]...], "end"}], "tools" (onToolEvent's), "metadata" (onMetadataEvent's),
//   "messages", "toolCalls", "interrupts", "streamError", "isLoading"}}}
import { readFileSync } from 'node:fs';

import { CustomStreamOrchestrator, FetchStreamTransport } from '@langchain/langgraph-sdk/ui';

const [url, ...scenarios] = process.argv.slice(2);
const version = JSON.parse(
  readFileSync(new URL('./node_modules/@langchain/langgraph-sdk/package.json', import.meta.url)),
).version;

const PROMPTS = {
  weather: 'What is the weather in Paris?',
  build: 'Run the build.',
  email: 'Email the team, please.',
  wait: 'Please wait for it.',
  crash: 'Make it crash.',
  story: 'Tell me a story.',
};

const human = (text) => ({ messages: [{ type: 'human', content: text }] });

// The transport useStream is given, recording what it posts and every event it reads.
class RecordingTransport {
  constructor(responses) {
    this.responses = responses;
    this.inner = new FetchStreamTransport({
      apiUrl: url,
      fetch: async (input, init) => {
        const record = { body: JSON.parse(init.body), status: null, events: [], end: 'open' };
        this.responses.push(record);
        const response = await fetch(input, init);
        record.status = response.status;
        return response;
      },
    });
  }

  async stream(payload) {
    const parts = await this.inner.stream(payload);
    const record = this.responses.at(-1);
    async function* recorded() {
      try {
        for await (const part of parts) {
          record.events.push([part.event, part.data]);
          yield part;
        }
        record.end = 'eof';
      } catch (e) {
        record.end = e?.name === 'AbortError' ? 'aborted' : `failed: ${e?.message ?? e}`;
        throw e;
      } finally {
        if (record.end === 'open') record.end = 'left';
      }
    }
    return recorded();
  }
}

function plain(message) {
  const out = { type: message.type ?? message.getType?.(), id: message.id ?? null, content: message.content };
  if (message.tool_calls?.length) out.tool_calls = message.tool_calls.map(({ id, name, args }) => ({ id, name, args }));
  if (message.tool_call_id) out.tool_call_id = message.tool_call_id;
  if (message.status) out.status = message.status;
  const reasoning = message.additional_kwargs?.reasoning_content;
  if (reasoning) out.reasoning = reasoning;
  return out;
}

class Scenario {
  constructor(name, n) {
    this.thread = `thread-${name}-${process.pid}-${n}`;
    this.responses = [];
    this.tools = [];
    this.metadata = [];
    this.steps = [];
    this.waiters = [];
    this.stream = this.open();
  }

  // A useStream instance on the scenario's thread (a new one: a page loaded again).
  open() {
    return new CustomStreamOrchestrator({
      transport: new RecordingTransport(this.responses),
      threadId: this.thread,
      onToolEvent: (data) => {
        this.tools.push(data);
        this.waiters = this.waiters.filter(([test, resolve]) => !(test(data) && (resolve(), true)));
      },
      onMetadataEvent: (data) => this.metadata.push(data),
    });
  }

  toolEvent(test) {
    return new Promise((resolve) => this.waiters.push([test, resolve]));
  }

  async say(text) {
    await this.stream.submit(human(text));
  }

  async decided(approved) {
    await this.say(PROMPTS.email);
    const interrupt = this.stream.interrupt;
    if (!interrupt?.id) throw new Error(`the turn did not end with an interrupt: ${JSON.stringify(interrupt)}`);
    this.steps.push({ step: 'asked', interrupt, interrupts: this.stream.interrupts, messages: this.stream.messages.map(plain) });
    await this.stream.submit(null, { command: { resume: { [interrupt.id]: { approved } } } });
  }

  result() {
    const s = this.stream;
    return {
      thread: this.thread,
      steps: this.steps,
      responses: this.responses,
      tools: this.tools,
      metadata: this.metadata,
      messages: s.messages.map(plain),
      toolCalls: s.toolCalls.map((t) => ({
        id: t.id,
        name: t.call.name,
        args: t.call.args,
        state: t.state,
        result: t.result ? { content: t.result.content, status: t.result.status ?? null } : null,
      })),
      interrupts: s.interrupts,
      streamError: s.error ? { name: s.error.name, message: s.error.message } : null,
      isLoading: s.isLoading,
    };
  }
}

async function post(path, body) {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}

const SCENARIOS = {
  async weather(s) { await s.say(PROMPTS.weather); },
  async build(s) { await s.say(PROMPTS.build); },
  async approve(s) { await s.decided(true); },
  async deny(s) { await s.decided(false); },

  async stop(s) {
    const sleeping = s.toolEvent((e) => e.event === 'on_tool_start' && e.name === 'sleep');
    const running = s.say(PROMPTS.wait);
    await Promise.race([sleeping, running]);
    s.stream.stop(); // only aborts the response: the turn goes on until stopped
    await running;
    const stopped = await post(`/${encodeURIComponent(s.thread)}/stop`);
    s.steps.push({ step: 'stop', ...stopped });
    const again = await post(`/${encodeURIComponent(s.thread)}/stop`);
    s.steps.push({ step: 'stop-again', ...again });
  },

  async crash(s) { await s.say(PROMPTS.crash); },

  async retry(s) {
    await s.decided(true);
    // The resume POST again, byte for byte, as a client retrying a dropped connection.
    const again = await post('', s.responses.at(-1).body);
    s.steps.push({ step: 'retry', status: again.status, events: events(again.text) });
  },

  // A page loaded again: a new useStream on the same thread gets the whole thread back
  // with its next turn's first values (the custom transport has no reconnect).
  async reload(s) {
    await s.say(PROMPTS.weather);
    s.steps.push({ step: 'before', messages: s.stream.messages.map(plain) });
    s.stream.dispose();
    s.stream = s.open();
    await s.say(PROMPTS.story);
  },
};

function events(text) {
  return text.split(/\r?\n\r?\n/).flatMap((block) => {
    const lines = block.split(/\r?\n/);
    const event = lines.find((l) => l.startsWith('event:'))?.slice(6).trim();
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart());
    return event ? [[event, data.length ? JSON.parse(data.join('\n')) : null]] : [];
  });
}

const results = {};
for (const [n, name] of scenarios.entries()) {
  const s = new Scenario(name, n);
  try {
    const run = SCENARIOS[name];
    if (!run) throw new Error(`unknown scenario ${name}`);
    await run(s);
    results[name] = { ok: true, ...s.result() };
  } catch (e) {
    results[name] = { ok: false, error: String(e?.stack ?? e), ...s.result() };
  }
}
process.stdout.write(JSON.stringify({ version, results }));
process.exit(0);
