// A small app on the AI SDK's React useChat, as a user would write it: the stock
// DefaultChatTransport, approvals sent automatically once answered, resume on load.
// Bundled by page/build.mjs once per AI SDK generation (`ai` and `@ai-sdk/react` aliased
// to that generation's packages). The chat id and the user's messages are kept in
// sessionStorage, as a real app restores what it stored; after a reload, `resume: true`
// rebuilds the assistant's message from the server's replay.
//
// For the test: window.chatView = {id, status, error, messages} after every render, and
// window.chatLog = {responses (ui_stream.mjs records), errors (onError), data (onData)}.
import { useChat } from '@ai-sdk/react';
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  uiMessageChunkSchema,
} from 'ai';
import { useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';

import { recordingFetch } from '../ui_stream.mjs';

const KEY = 'toolstream-chat';
const stored = JSON.parse(sessionStorage.getItem(KEY) ?? 'null');
const chatId = stored?.id ?? `chat-${crypto.randomUUID()}`;
const log = { responses: [], errors: [], data: [] };
window.chatLog = log;
const transport = new DefaultChatTransport({
  api: '/api/chat',
  fetch: recordingFetch(uiMessageChunkSchema(), log.responses),
});

function Part({ part, decide }) {
  if (part.type === 'text') return <p className="text">{part.text}</p>;
  if (!part.type.startsWith('tool-')) return null;
  const asking = part.state === 'approval-requested';
  return (
    <div className="tool" data-tool={part.type.slice(5)} data-state={part.state}>
      <code>{part.type.slice(5)}</code> <span className="state">{part.state}</span>
      {part.approval?.requestReason && <span className="reason">{part.approval.requestReason}</span>}
      {asking && (
        <>
          <button className="approve" onClick={() => decide(part.approval.id, true)}>Approve</button>
          <button className="deny" onClick={() => decide(part.approval.id, false)}>Deny</button>
        </>
      )}
    </div>
  );
}

function App() {
  const [input, setInput] = useState('');
  const { messages, status, error, sendMessage, addToolApprovalResponse } = useChat({
    id: chatId,
    messages: stored?.messages ?? [],
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    resume: true,
    onError: (e) => log.errors.push(String(e?.message ?? e)),
    onData: (part) => log.data.push(part),
  });
  useEffect(() => {
    const users = messages.filter((m) => m.role === 'user');
    sessionStorage.setItem(KEY, JSON.stringify({ id: chatId, messages: users }));
    window.chatView = { id: chatId, status, error: error ? String(error.message ?? error) : '', messages };
  }, [messages, status, error]);
  const decide = (id, approved) => addToolApprovalResponse({ id, approved, reason: approved ? undefined : 'not now' });
  return (
    <main data-status={status}>
      {messages.map((m) => (
        <div key={m.id} className={`message ${m.role}`} data-id={m.id}>
          {m.parts.map((p, i) => <Part key={i} part={p} decide={decide} />)}
        </div>
      ))}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input id="prompt" value={input} onChange={(e) => setInput(e.target.value)} />
        <button id="send" type="submit" disabled={status !== 'ready' && status !== 'error'}>Send</button>
      </form>
      {error && <p id="error">{String(error.message ?? error)}</p>}
    </main>
  );
}

createRoot(document.getElementById('root')).render(<App />);
