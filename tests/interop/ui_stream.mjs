// What an AI SDK chat transport reads, recorded on the side: a fetch that tees every
// response body, parses its SSE frames and validates each chunk with the generation's own
// uiMessageChunkSchema(). Shared by the Node driver (chat_ai.mjs) and the useChat page
// (use_chat_page.jsx, bundled for Chromium).

// recordingFetch(schema, log) -> a fetch for DefaultChatTransport({fetch}). Each request
// appends {method, path, status, chunks, refused, end} to `log`: `chunks` are the parsed
// chunks ('[DONE]' as the string), `refused` the chunks the schema refused ({index,
// chunk, error}), `end` how the body ended: 'eof' (whole), 'aborted' (the client's own
// stop), 'partial frame' or 'error: …' (a cut body), 'no body'. `sent` maps each entry
// to the JSON body the transport posted (not printed: a retry re-posts it).
export function recordingFetch(schema, log, base = globalThis.fetch.bind(globalThis)) {
  return async (input, init = {}) => {
    const url = typeof input === 'string' ? input : input.url;
    const entry = {
      method: init.method ?? 'GET',
      path: new URL(url, globalThis.location?.href).pathname,
      status: null,
      chunks: [],
      refused: [],
      end: 'open',
    };
    log.push(entry);
    if (typeof init.body === 'string') sentBodies.set(entry, JSON.parse(init.body));
    let response;
    try {
      response = await base(input, init);
    } catch (e) {
      entry.end = init.signal?.aborted ? 'aborted' : `error: ${e?.message ?? e}`;
      throw e;
    }
    entry.status = response.status;
    if (!response.body || NULL_BODY.includes(response.status)) {
      entry.end = 'no body';
      return response;
    }
    const [mine, theirs] = response.body.tee();
    pending.add(readChunks(mine, schema, entry, init.signal));
    return new Response(theirs, {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}

// Statuses whose responses have no body (a browser may still give them an empty stream).
const NULL_BODY = [101, 103, 204, 205, 304];
const sentBodies = new WeakMap();
const pending = new Set();

// The JSON body a recorded request posted.
export function sentBody(entry) {
  return sentBodies.get(entry);
}

// Wait until every recorded body has been read to its end (at most `ms`).
export async function settled(ms = 15000) {
  const end = Date.now() + ms;
  while (pending.size && Date.now() < end) {
    const all = [...pending];
    await Promise.race([Promise.all(all), new Promise((r) => setTimeout(r, end - Date.now()))]);
    for (const p of all) pending.delete(p);
  }
}

// Read a whole response the way recordingFetch records one (for a request made by hand).
export async function readResponse(response, schema, entry) {
  entry.status = response.status;
  if (!response.body || NULL_BODY.includes(response.status)) {
    entry.end = 'no body';
    return entry;
  }
  await readChunks(response.body, schema, entry, undefined);
  return entry;
}

async function readChunks(stream, schema, entry, signal) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n/g, '\n');
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        await onBlock(block, schema, entry);
      }
    }
    entry.end = buffer.trim() ? 'partial frame' : 'eof';
  } catch (e) {
    entry.end = signal?.aborted ? 'aborted' : `error: ${e?.message ?? e}`;
  }
}

async function onBlock(block, schema, entry) {
  const data = block
    .split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5));
  if (!data.length) return; // a comment (": ping")
  const text = data.join('\n');
  if (text === '[DONE]') {
    entry.chunks.push('[DONE]');
    return;
  }
  const index = entry.chunks.length;
  let chunk;
  try {
    chunk = JSON.parse(text);
  } catch {
    entry.chunks.push({ $unparsed: text });
    entry.refused.push({ index, chunk: text, error: 'not JSON' });
    return;
  }
  entry.chunks.push(chunk);
  const result = await schema.validate(chunk);
  if (!result.success) {
    entry.refused.push({ index, chunk, error: String(result.error?.message ?? 'invalid').slice(0, 300) });
  }
}
