// AG-UI's own client (HttpAgent, with its event verifier) against a toolstream
// ChatApp(dialect="agui"). argv: <url> <scenario>; prints JSON:
// {"ok": true, "runs": [{"events": [types], "outcome", "interrupts"}], "messages": [...]}.
import { HttpAgent } from '@ag-ui/client';

const [url, scenario] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId: `thread-${scenario}-${process.pid}` });
const runs = [];

async function run(params) {
  const events = [];
  let outcome = null;
  await agent.runAgent(params, {
    onEvent: ({ event }) => { events.push(event.type === 'CUSTOM' ? `CUSTOM ${event.name}` : event.type); },
    onRunFinishedEvent: (e) => { outcome = e.outcome; },
  });
  runs.push({
    runId: params.runId,
    events,
    outcome,
    interrupts: agent.pendingInterrupts.map((i) => ({ id: i.id, toolCallId: i.toolCallId ?? null })),
  });
}

try {
  agent.addMessage({ id: 'u1', role: 'user', content: 'Email the team, please.' });
  await run({ runId: 'run-1' });
  const [interrupt] = agent.pendingInterrupts;
  if (!interrupt) throw new Error('the first run did not end with an interrupt');
  const approved = scenario !== 'deny';
  const resume = [{ interruptId: interrupt.id, status: 'resolved', payload: { approved } }];
  await run({ runId: 'run-2', resume });
  process.stdout.write(JSON.stringify({ ok: true, runs, messages: agent.messages }));
} catch (e) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(e?.stack ?? e), runs, messages: agent.messages }));
}
process.exit(0);
