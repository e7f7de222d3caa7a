// Runs the peers' own validators over streams produced by toolstream's dialects.
// stdin: [{"name", "dialect": "agui"|"ai_sdk", "messages": [payload | {"$raw": "[DONE]"}]}]
// stdout: [{"name", "ok", "error"?, "messages"?: [{"id", "parts": [...]}]}]
import { verifyEvents } from '@ag-ui/client';
import { EventSchemas } from '@ag-ui/core/schemas';
import { uiMessageChunkSchema, readUIMessageStream } from 'ai';
import { from, lastValueFrom, toArray } from 'rxjs';

const input = JSON.parse(await new Promise((resolve) => {
  let text = '';
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (c) => { text += c; });
  process.stdin.on('end', () => resolve(text));
}));

async function checkAgui(messages) {
  // Each event by @ag-ui/core's own schemas, then the whole stream by the client's verifier.
  for (const [i, m] of messages.entries()) {
    const result = EventSchemas.safeParse(m);
    if (!result.success) throw new Error(`event ${i} ${JSON.stringify(m)}: ${result.error.message}`);
  }
  await lastValueFrom(from(messages).pipe(verifyEvents(false), toArray()));
  return {};
}

async function checkAiSdk(messages) {
  const schema = uiMessageChunkSchema();
  const chunks = [];
  for (const [i, m] of messages.entries()) {
    if (m && m.$raw !== undefined) {
      if (m.$raw !== '[DONE]' || i !== messages.length - 1) throw new Error(`raw data ${JSON.stringify(m.$raw)} at ${i}`);
      continue;
    }
    const result = await schema.validate(m);
    if (!result.success) throw new Error(`chunk ${i} ${JSON.stringify(m)}: ${result.error?.message ?? 'invalid'}`);
    chunks.push(m);
  }
  // One assistant message per run: split at each "start", as per-request clients see them.
  const runs = [];
  for (const c of chunks) {
    if (c.type === 'start' || runs.length === 0) runs.push([]);
    runs[runs.length - 1].push(c);
  }
  const out = [];
  let previous;
  for (const run of runs) {
    // An "error" chunk reaches onError by design (the client shows it): record it.
    const errors = [];
    const stream = new ReadableStream({ start(ctrl) { for (const c of run) ctrl.enqueue(c); ctrl.close(); } });
    // A message left waiting for an approval is continued by the next response, as
    // useChat continues the last assistant message after addToolApprovalResponse.
    const waiting = previous?.parts?.some((p) => p.state === 'approval-requested' || p.state === 'approval-responded');
    let last;
    for await (const message of readUIMessageStream({ stream, ...(waiting ? { message: previous } : {}), onError: (e) => { errors.push(String(e?.message ?? e)); } })) last = message;
    previous = last;
    out.push({
      id: last?.id ?? null,
      errors,
      // the whole message as JSON (undefined fields left out), as a client stores it
      full: last === undefined ? null : JSON.parse(JSON.stringify(last)),
      parts: (last?.parts ?? []).filter((p) => p.type !== 'step-start').map((p) => ({
        type: p.type, state: p.state ?? null, toolCallId: p.toolCallId ?? null,
        output: p.output ?? null, errorText: p.errorText ?? null, input: p.input ?? null,
        preliminary: p.preliminary ?? null, approval: p.approval ?? null,
      })),
    });
  }
  return { messages: out };
}

const results = [];
for (const c of input) {
  try {
    const extra = c.dialect === 'agui' ? await checkAgui(c.messages) : await checkAiSdk(c.messages);
    results.push({ name: c.name, ok: true, ...extra });
  } catch (e) {
    results.push({ name: c.name, ok: false, error: String(e?.message ?? e) });
  }
}
process.stdout.write(JSON.stringify(results));
