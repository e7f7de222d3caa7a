// AG-UI's own client (HttpAgent, with its event verifier) against a toolstream
// ChatApp(dialect="agui").
//
// argv: <url> <scenario> [<scenario> ...]
// Runs the scenarios in sequence, each on a thread of its own, and prints one JSON
// document: {"version", "results": {<scenario>: {"ok", "error"?, "thread", "steps",
//   "runs": [{"runId", "events" (types), "outcome" (the client's reading), "finished"
//   (RUN_FINISHED's own outcome), "runError", "failed" (runAgent rejected), "interrupts"}],
//   "messages" (the agent's), "retry"?}}}
import { readFileSync } from 'node:fs';

import { HttpAgent, verifyEvents } from '@ag-ui/client';
import { from, lastValueFrom, toArray } from 'rxjs';

const [url, ...scenarios] = process.argv.slice(2);
const version = JSON.parse(readFileSync(new URL('./node_modules/@ag-ui/client/package.json', import.meta.url))).version;

const PROMPTS = {
  weather: 'What is the weather in Paris?',
  build: 'Run the build.',
  email: 'Email the team, please.',
  wait: 'Please wait for it.',
  crash: 'Make it crash.',
};

class Scenario {
  constructor(name, n) {
    this.thread = `thread-${name}-${process.pid}-${n}`;
    this.posted = []; // the bodies HttpAgent posted
    this.agent = new HttpAgent({
      url,
      threadId: this.thread,
      fetch: (input, init) => {
        if (typeof init?.body === 'string') this.posted.push(JSON.parse(init.body));
        return fetch(input, init);
      },
    });
    this.runs = [];
    this.steps = [];
  }

  say(text) {
    this.agent.addMessage({ id: `u${this.runs.length + 1}`, role: 'user', content: text });
  }

  // One runAgent; `seen(event)` is called with every event as it arrives.
  async run(params, seen = () => {}) {
    const record = { runId: params.runId, events: [], outcome: null, finished: null, runError: null, failed: null, interrupts: [] };
    this.runs.push(record);
    try {
      await this.agent.runAgent(params, {
        onEvent: ({ event }) => {
          record.events.push(event.type === 'CUSTOM' ? `CUSTOM ${event.name}` : event.type);
          seen(event);
        },
        onRunFinishedEvent: ({ event, outcome }) => {
          record.outcome = outcome;
          record.finished = event.outcome ?? null;
        },
        onRunErrorEvent: ({ event }) => { record.runError = event.message; },
      });
    } catch (e) {
      record.failed = String(e?.message ?? e);
    }
    record.interrupts = this.agent.pendingInterrupts.map((i) => ({ id: i.id, toolCallId: i.toolCallId ?? null, message: i.message ?? null }));
    return record;
  }

  async decided(approved) {
    this.say(PROMPTS.email);
    await this.run({ runId: 'run-1' });
    const [interrupt] = this.agent.pendingInterrupts;
    if (!interrupt) throw new Error('the first run did not end with an interrupt');
    const resume = [{ interruptId: interrupt.id, status: 'resolved', payload: { approved } }];
    await this.run({ runId: 'run-2', resume });
  }

  result() {
    return { thread: this.thread, steps: this.steps, runs: this.runs, messages: this.agent.messages };
  }
}

const SCENARIOS = {
  async weather(s) {
    s.say(PROMPTS.weather);
    await s.run({ runId: 'run-1' });
  },

  async build(s) {
    s.say(PROMPTS.build);
    await s.run({ runId: 'run-1' });
  },

  async approve(s) { await s.decided(true); },
  async deny(s) { await s.decided(false); },

  async stop(s) {
    s.say(PROMPTS.wait);
    let started;
    const sleeping = new Promise((resolve) => { started = resolve; });
    const running = s.run({ runId: 'run-1' }, (e) => {
      if (e.type === 'TOOL_CALL_START' && e.toolCallName === 'sleep') started();
    });
    await Promise.race([sleeping, running]);
    const stopped = await fetch(`${url}/${encodeURIComponent(s.thread)}/stop`, { method: 'POST' });
    s.steps.push({ step: 'stop', status: stopped.status, body: await stopped.text() });
    await running;
  },

  async crash(s) {
    s.say(PROMPTS.crash);
    await s.run({ runId: 'run-1' });
  },

  async retry(s) {
    await s.decided(true);
    // The resume POST again, byte for byte, as a client retrying a dropped connection.
    const body = s.posted[s.posted.length - 1];
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(body),
    });
    const text = await response.text();
    const events = text.split(/\r?\n\r?\n/).flatMap((block) => {
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart());
      return data.length ? [JSON.parse(data.join('\n'))] : [];
    });
    let verified = null;
    if (events.length) {
      try {
        await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
        verified = 'ok';
      } catch (e) {
        verified = String(e?.message ?? e);
      }
    }
    s.steps.push({ step: 'retry', status: response.status, events: events.map((e) => e.type), verified });
  },
};

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
