// The A2A JavaScript SDK's own client (@a2a-js/sdk: ClientFactory + the JSON-RPC
// transport, as its samples build it) against a toolstream A2AApp.
//
// argv: <url> <other url> <scenario> [<scenario> ...]
// The client is made from <url>'s agent card; a scenario that resumes a cut stream does
// so with a second client made from <other url>'s card (another gateway process of the
// same bus, or <url> again). Runs the scenarios in sequence, each on a task of its own,
// and prints one JSON document:
// {"version", "card" (the card the client read), "results": {<scenario>: {"ok",
//   "error"?, "calls": [{"call", "headers" (what it sent), "updates" (stream calls:
//   every StreamResponse the client yielded, as proto-JSON: StreamResponse.toJSON),
//   "end" ("done" | "cut" | "error: …"), "result"? (getTask / cancelTask: the Task as
//   proto-JSON)}], "wire": [every JSON-RPC exchange: {"url", "method", "headers",
//   "status", "results" (each JSON-RPC "result" or "error" read off the wire, unparsed),
//   "end"}], "folded": the Task the SDK's own ResultManager builds from every
//   StreamResponse of the scenario, in order (what A2A's task / status / artifact
//   semantics make of them: a Task is the state, an append chunk extends its artifact)}}}
import { readFileSync } from 'node:fs';

import { AgentCard, Role, StreamResponse, Task, TaskState } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  ServiceParameters,
  withA2AExtensions,
} from '@a2a-js/sdk/client';
import { InMemoryTaskStore, ResultManager, ServerCallContext } from '@a2a-js/sdk/server';

const [url, otherUrl, ...scenarios] = process.argv.slice(2);
const version = JSON.parse(
  readFileSync(new URL('./node_modules/@a2a-js/sdk/package.json', import.meta.url)),
).version;

const EXTENSION = 'urn:toolstream:a2a:tool-lifecycle:v1';
// What the user types for each scenario: the canonical script's keyword picks the task.
const PROMPTS = {
  weather: 'What is the weather in Paris?',
  build: 'Run the build.',
  email: 'Email the team, please.',
  story: 'Tell me a story.',
  wait: 'Please wait for it.',
  crash: 'Make it crash.',
};
// How many artifact updates a cut stream reads before the client goes away.
const CUT_AFTER = 10;

// A fetch for the transport that records every exchange on the side: the JSON-RPC method
// and the headers sent, and each JSON-RPC result (or error) as it came off the wire.
function recordingFetch(log) {
  return async (input, init = {}) => {
    const headers = Object.fromEntries(
      Object.entries(init.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]),
    );
    const sent = typeof init.body === 'string' ? JSON.parse(init.body) : null;
    const target = typeof input === 'string' ? input : input.url;
    const entry = { url: target, method: sent?.method ?? null, headers, status: null, results: [], end: 'open' };
    log.push(entry);
    const response = await fetch(input, init);
    entry.status = response.status;
    if (!(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      const body = await response.clone().text();
      try {
        const parsed = JSON.parse(body);
        entry.results.push('error' in parsed ? { error: parsed.error } : { result: parsed.result });
      } catch {
        entry.results.push({ body });
      }
      entry.end = 'eof';
      return response;
    }
    const [mine, theirs] = response.body.tee();
    const reading = readFrames(mine, entry).finally(() => pending.delete(reading));
    pending.add(reading);
    return new Response(theirs, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

const pending = new Set();

async function readFrames(body, entry) {
  let buffer = '';
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame
          .split('\n')
          .filter((line) => line.startsWith('data:'))
          .map((line) => line.slice(5).replace(/^ /, ''))
          .join('\n');
        if (!data) continue;
        const parsed = JSON.parse(data);
        entry.results.push('error' in parsed ? { error: parsed.error } : { result: parsed.result });
      }
    }
    entry.end = buffer ? 'partial frame' : 'eof';
  } catch (e) {
    entry.end = `cut: ${e?.name ?? e}`;
  }
}

async function makeClient(base, wire) {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: recordingFetch(wire) })],
    }),
  );
  return factory.createFromUrl(base);
}

// Every call names the extension (A2A-Extensions), as the SDK's helper spells it.
function options(extra = {}, signal = undefined) {
  const serviceParameters = ServiceParameters.create(withA2AExtensions(EXTENSION), (p) =>
    Object.assign(p, extra),
  );
  return { serviceParameters, signal };
}

function userMessage(parts, { taskId = '', contextId = '' } = {}) {
  return {
    tenant: '',
    metadata: {},
    message: {
      messageId: `m-${process.pid}-${Math.random().toString(16).slice(2)}`,
      role: Role.ROLE_USER,
      parts: parts.map((content) => ({ content, metadata: undefined, filename: '', mediaType: '' })),
      taskId,
      contextId,
      extensions: [],
      metadata: {},
      referenceTaskIds: [],
    },
    configuration: undefined,
  };
}

const text = (value) => ({ $case: 'text', value });
const data = (value) => ({ $case: 'data', value });

// The data part of a status update (a tool call's lifecycle event), or undefined.
function callData(event) {
  if (event.payload?.$case !== 'statusUpdate') return undefined;
  const part = event.payload.value.status?.message?.parts?.[0];
  return part?.content?.$case === 'data' ? part.content.value : undefined;
}

function eventId(event) {
  const { $case, value } = event.payload ?? {};
  if ($case === 'statusUpdate' || $case === 'artifactUpdate') return value.metadata?.event_id;
  return undefined;
}

class Scenario {
  constructor() {
    this.calls = [];
    this.wire = [];
    this.client = null;
    this.other = null;
    this.task = null; // {id, contextId}
    this.lastEventId = null;
    this.events = []; // every StreamResponse yielded, for the fold
  }

  async open() {
    this.client = await makeClient(url, this.wire);
    this.other = otherUrl === url ? this.client : await makeClient(otherUrl, this.wire);
    return this.client;
  }

  // Read a stream call to its end, or until `stop(event)` says to go away (the
  // connection is then aborted, as a client closing its tab).
  async read(call, open, { stop, extra } = {}) {
    const entry = { call, headers: extra ?? {}, updates: [], end: 'open' };
    this.calls.push(entry);
    const controller = new AbortController();
    try {
      for await (const event of open(options(extra, controller.signal))) {
        entry.updates.push(StreamResponse.toJSON(event));
        this.events.push(event);
        if (event.payload?.$case === 'task') {
          this.task = { id: event.payload.value.id, contextId: event.payload.value.contextId };
        }
        this.lastEventId = eventId(event) ?? this.lastEventId;
        if (stop?.(event, entry)) {
          entry.end = 'cut';
          controller.abort();
          return entry;
        }
      }
      entry.end = 'done';
    } catch (e) {
      entry.end = `error: ${e?.message ?? e}`;
    }
    return entry;
  }

  send(parts, ids, how) {
    return this.read('sendMessageStream', (o) => this.client.sendMessageStream(userMessage(parts, ids), o), how);
  }

  resubscribe(client, extra) {
    const id = this.task.id;
    return this.read('resubscribeTask', (o) => client.resubscribeTask({ tenant: '', id }, o), { extra });
  }

  async unary(call, run) {
    const entry = { call, headers: {} };
    this.calls.push(entry);
    try {
      entry.result = Task.toJSON(await run(options()));
    } catch (e) {
      entry.error = String(e?.message ?? e);
    }
    return entry;
  }

  // The task as the SDK's ResultManager folds this scenario's stream responses.
  async fold() {
    if (!this.events.length) return null;
    const manager = new ResultManager(new InMemoryTaskStore(), new ServerCallContext());
    for (const { payload } of this.events) {
      await manager.processEvent({ kind: payload.$case, data: payload.value });
    }
    const task = manager.getCurrentTask();
    return task ? Task.toJSON(task) : null;
  }

  getTask(client = this.client) {
    return this.unary('getTask', (o) => client.getTask({ tenant: '', id: this.task.id }, o));
  }

  cancelTask() {
    return this.unary('cancelTask', (o) => this.client.cancelTask({ tenant: '', id: this.task.id, metadata: {} }, o));
  }
}

const artifacts = (entry) => entry.updates.filter((u) => u.artifactUpdate).length;

async function approval(s, approved) {
  await s.open();
  const first = await s.send([text(PROMPTS.email)]);
  const asked = first.updates
    .map((u) => u.statusUpdate?.status?.message?.parts?.[0]?.data)
    .find((d) => d?.state === 'awaiting_approval');
  if (!asked) throw new Error('no approval was asked');
  const decision = { approval_id: asked.approval_id, approved };
  if (!approved) decision.reason = 'not now';
  await s.send([data(decision)], { taskId: s.task.id, contextId: s.task.contextId });
  await s.getTask();
}

// Poll getTask (not recorded as a call) until `done(task)` holds.
async function until(s, client, what, done) {
  const end = Date.now() + 15000;
  while (Date.now() < end) {
    if (done(await client.getTask({ tenant: '', id: s.task.id }, options()))) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const textOf = (task) =>
  (task.artifacts ?? []).flatMap((a) => a.parts).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

const SCENARIOS = {
  async weather(s) {
    await s.open();
    await s.send([text(PROMPTS.weather)]);
    await s.getTask();
  },

  // The blocking SendMessage: the task as it ended.
  async send(s) {
    await s.open();
    const sent = await s.unary('sendMessage', async (o) => {
      const result = await s.client.sendMessage(userMessage([text(PROMPTS.weather)]), o);
      if (!result.id) throw new Error(`sendMessage answered a Message, not a Task: ${JSON.stringify(result)}`);
      s.task = { id: result.id, contextId: result.contextId };
      return result;
    });
    if (sent.error) throw new Error(`sendMessage: ${sent.error}`);
    await s.getTask();
  },

  async build(s) {
    await s.open();
    await s.send([text(PROMPTS.build)]);
    await s.getTask();
  },

  async crash(s) {
    await s.open();
    await s.send([text(PROMPTS.crash)]);
    await s.getTask();
  },

  async approve(s) { await approval(s, true); },
  async deny(s) { await approval(s, false); },

  async cancel(s) {
    await s.open();
    let cancelling = null;
    await s.send([text(PROMPTS.wait)], undefined, {
      // Once the sleep call runs, cancel the task; the stream reads on to its end.
      stop(event) {
        const call = callData(event);
        if (!cancelling && call?.tool === 'sleep' && call.state === 'running') {
          cancelling = s.cancelTask();
        }
        return false;
      },
    });
    if (!cancelling) throw new Error('the sleep call never ran');
    await cancelling;
    await s.getTask();
  },

  // The whole story, read without a cut: what a resumed reading must add up to.
  async story(s) {
    await s.open();
    await s.send([text(PROMPTS.story)]);
    await s.getTask();
  },

  // Cut after a few words; once the story has gone on (more words than the client
  // read), resubscribe on the other client from the last event id read.
  async resume(s) {
    await s.open();
    const cut = await s.send([text(PROMPTS.story)], undefined, { stop: (_, entry) => artifacts(entry) >= CUT_AFTER });
    const read = cut.updates.map((u) => u.artifactUpdate?.artifact?.parts?.[0]?.text ?? '').join('');
    await until(s, s.other, 'more words', (task) => textOf(task).length > read.length);
    await s.resubscribe(s.other, { 'Last-Event-ID': s.lastEventId });
    await s.getTask(s.other);
  },

  // Cut, wait for the task to finish, then resubscribe from the last event id read.
  async 'resume-after-end'(s) {
    await s.open();
    await s.send([text(PROMPTS.story)], undefined, { stop: (_, entry) => artifacts(entry) >= CUT_AFTER });
    await until(s, s.other, 'the end', (task) => task.status?.state === TaskState.TASK_STATE_COMPLETED);
    await s.resubscribe(s.other, { 'Last-Event-ID': s.lastEventId });
  },
};

const results = {};
for (const name of scenarios) {
  const s = new Scenario();
  try {
    const run = SCENARIOS[name];
    if (!run) throw new Error(`unknown scenario ${name}`);
    await run(s);
    await Promise.all(pending);
    results[name] = { ok: true, calls: s.calls, wire: s.wire, folded: await s.fold() };
  } catch (e) {
    await Promise.all(pending);
    results[name] = { ok: false, error: String(e?.stack ?? e), calls: s.calls, wire: s.wire };
  }
}
const card = AgentCard.toJSON(await (await new ClientFactory().createFromUrl(url)).getAgentCard());
// Exit once the document is flushed (a pipe takes 64 KiB at a time).
process.stdout.write(JSON.stringify({ version, card, results }), () => process.exit(0));
