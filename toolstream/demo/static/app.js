// toolstream demo page: a reducer over native events, rendered as cards. No build step.
"use strict";
const SESSION = new URLSearchParams(location.search).get("session") || "demo";
const TYPES = ["stream.reset", "run.started", "run.finished", "tool.created", "tool.args.delta",
  "tool.ready", "tool.queued", "tool.started", "tool.progress", "tool.output.delta",
  "tool.output.partial", "tool.completed", "tool.failed", "tool.cancelled", "batch.phase"];
const ORDER = {created: 0, ready: 1, queued: 2, running: 3, completed: 4, failed: 4, cancelled: 4, lost: 4};
const TERMINAL = new Set(["completed", "failed", "cancelled", "lost"]);
const MAX_FINISHED = 300;

const state = {calls: new Map(), runs: new Map(), batches: new Map(), lastId: null};
const dirty = new Set();
let transport = null;

// -- the reducer (what toolstream.LiveView does) -------------------------------------------
function call(e) {
  let c = state.calls.get(e.call_id);
  if (!c) {
    c = {call_id: e.call_id, tool: e.tool, state: "created", fraction: null, summary: "", error: "",
         output: "", started: null, ended: null, duration: null, created: e.ts};
    state.calls.set(e.call_id, c);
  }
  return c;
}
function advance(c, s, ts) {
  if (ORDER[c.state] >= ORDER[s] && c.state !== "created") return false;
  if (ORDER[c.state] > ORDER[s]) return false;
  c.state = s;
  if (s === "running" && !c.started) c.started = ts;
  return true;
}
function apply(e) {
  state.lastId = e.id;
  switch (e.type) {
    case "stream.reset": return reset(e);
    case "run.started": state.runs.set(e.run_id, {title: e.title || e.run_id, state: "running"}); return;
    case "run.finished": { const r = state.runs.get(e.run_id) || {title: e.run_id}; r.state = e.outcome; state.runs.set(e.run_id, r); return; }
    case "batch.phase": state.batches.set(e.batch_id, e); return;
  }
  if (!e.call_id) return;
  const c = call(e);
  if (TERMINAL.has(c.state)) return;
  dirty.add(c.call_id);
  if (e.summary) c.summary = e.summary;
  switch (e.type) {
    case "tool.ready": advance(c, "ready", e.ts); break;
    case "tool.queued": advance(c, "queued", e.ts); break;
    case "tool.started": advance(c, "running", e.ts); break;
    case "tool.progress": advance(c, "running", e.ts); c.fraction = e.fraction ?? c.fraction;
      if (e.message) c.summary = e.message; break;
    case "tool.output.delta": advance(c, "running", e.ts); c.output = (c.output + e.text).slice(-600); break;
    case "tool.output.partial": advance(c, "running", e.ts); c.output = JSON.stringify(e.value).slice(0, 600); break;
    case "tool.completed": c.state = "completed"; c.fraction = 1; finish(c, e); break;
    case "tool.failed": c.state = "failed"; c.error = `${e.error.type}: ${e.error.message}`; finish(c, e); break;
    case "tool.cancelled": c.state = "cancelled"; c.error = e.summary ? "" : `cancelled: ${e.reason || ""}`; finish(c, e); break;
  }
}
function finish(c, e) { c.ended = e.ts; c.duration = e.duration_s; if (!c.started) c.started = e.ts; }
function reset(e) {
  const present = new Set(e.snapshot.calls.map((c) => c.call_id));
  for (const c of state.calls.values()) {
    if (!present.has(c.call_id) && !TERMINAL.has(c.state)) {   // vanished in a restart
      c.state = "lost"; c.error = "lost in a server restart"; dirty.add(c.call_id);
    }
  }
  for (const s of e.snapshot.calls) {
    state.calls.set(s.call_id, {call_id: s.call_id, tool: s.tool, state: s.state, fraction: s.fraction,
      summary: (TERMINAL.has(s.state) ? s.summary : s.message || s.summary) || "",
      output: (s.output_text || "").slice(-600),
      error: s.error ? `${s.error.type}: ${s.error.message}` : (s.state === "cancelled" ? `cancelled: ${s.reason || ""}` : ""),
      started: s.started_ts, ended: s.ended_ts, duration: s.duration_s, created: s.created_ts});
    dirty.add(s.call_id);
  }
  for (const r of e.snapshot.runs) state.runs.set(r.run_id, {title: r.title || r.run_id, state: r.state});
  for (const b of e.snapshot.batches) state.batches.set(b.batch_id, b);
  trim();
}
function trim() {
  const finished = [...state.calls.values()].filter((c) => TERMINAL.has(c.state));
  for (const c of finished.slice(0, Math.max(0, finished.length - MAX_FINISHED))) {
    state.calls.delete(c.call_id);
    document.getElementById(`call-${c.call_id}`)?.remove();
  }
}

// -- rendering: only what changed, once per frame -------------------------------------------
const cards = document.getElementById("cards");
function fmt(s) { return s == null ? "" : s < 1 ? `${Math.round(s * 1000)} ms` : s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`; }
function card(c) {
  let el = document.getElementById(`call-${c.call_id}`);
  if (!el) {
    el = document.createElement("div");
    el.className = "card"; el.id = `call-${c.call_id}`;
    el.innerHTML = `<div class="top"><span class="tool"></span><span class="badge"></span></div>
      <div class="bar"><i></i></div><div class="meta"><span class="time"></span><span class="id"></span></div>
      <div class="summary"></div><div class="error"></div><div class="output"></div>`;
    cards.prepend(el);
  }
  el.dataset.state = c.state;
  el.querySelector(".tool").textContent = c.tool;
  el.querySelector(".badge").innerHTML = (c.state === "running" ? '<span class="spinner"></span>' : "") + c.state;
  el.querySelector(".bar > i").style.width = `${Math.round((c.fraction ?? (c.state === "completed" ? 1 : 0)) * 100)}%`;
  el.querySelector(".id").textContent = c.call_id.slice(0, 14);
  el.querySelector(".summary").textContent = c.summary || "";
  el.querySelector(".error").textContent = c.error || "";
  el.querySelector(".output").textContent = c.output || "";
  el.querySelector(".time").textContent = elapsed(c);
}
function elapsed(c) {
  if (c.duration != null) return fmt(c.duration);
  if (!c.started) return "";
  return fmt(Math.max(0, (c.ended || Date.now() / 1000) - c.started));
}
function render() {
  if (state.calls.size > MAX_FINISHED + 50) trim();   // amortised: at most once per frame
  for (const id of dirty) { const c = state.calls.get(id); if (c) card(c); }
  dirty.clear();
  for (const c of state.calls.values()) {   // keep running clocks moving
    if (c.state !== "running") continue;
    const time = document.getElementById(`call-${c.call_id}`)?.querySelector(".time");
    if (time) time.textContent = elapsed(c);
  }
  const runs = [...state.runs.values()];
  const run = runs[runs.length - 1];
  document.getElementById("run").textContent = run ? `${run.title} — ${run.state}` : "";
  document.getElementById("batches").innerHTML = [...state.batches.values()].slice(-2).map((b) =>
    `<div class="batch">batch ${b.batch_id.slice(0, 14)}: ${b.phase} (${Object.entries(b.counts).map(([k, v]) => `${v} ${k}`).join(", ")})</div>`).join("");
  requestAnimationFrame(render);
}
requestAnimationFrame(render);

// -- transports: both resume from the last id ------------------------------------------------
function setStatus(text, cls) { const s = document.getElementById("status"); s.textContent = text; s.className = `status ${cls}`; }
function onEvent(data) { apply(data); }

function openSSE() {
  const q = new URLSearchParams({session: SESSION});
  if (state.lastId) q.set("last_event_id", state.lastId);
  const source = new EventSource(`/events?${q}`);   // the browser resumes with Last-Event-ID itself
  for (const t of TYPES) source.addEventListener(t, (m) => onEvent(JSON.parse(m.data)));
  source.onopen = () => setStatus("live (SSE)", "live");
  source.onerror = () => setStatus("reconnecting…", "down");
  return {close: () => source.close()};
}
function openWS() {
  let ws = null, closed = false, delay = 250;
  const connect = () => {
    ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
    ws.onopen = () => {
      delay = 250;
      const sub = {op: "subscribe", session: SESSION};
      if (state.lastId) sub.after = state.lastId;
      ws.send(JSON.stringify(sub));
      setStatus("live (WebSocket)", "live");
    };
    ws.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (msg.op === "ping") ws.send('{"op":"pong"}');
      else if (msg.op === "event") onEvent(msg.data);
    };
    ws.onclose = () => {
      if (closed) return;
      setStatus("reconnecting…", "down");
      setTimeout(connect, delay); delay = Math.min(delay * 2, 3000);
    };
  };
  connect();
  return {close: () => { closed = true; ws && ws.close(); }};
}
function switchTransport(kind) {
  if (transport) transport.close();
  transport = kind === "ws" ? openWS() : openSSE();
  window.toolstreamTransport = kind;
}
document.getElementById("transport").addEventListener("change", (e) => switchTransport(e.target.value));
switchTransport("sse");

// -- the raw wire panel ------------------------------------------------------------------------
let raw = null;
document.getElementById("dialect").addEventListener("change", (e) => {
  if (raw) raw.close();
  const name = e.target.value, panel = document.getElementById("raw"), log = document.getElementById("raw-log");
  panel.hidden = !name;
  if (!name) return;
  document.getElementById("raw-name").textContent = name;
  log.textContent = "";
  raw = new EventSource(`/events?session=${encodeURIComponent(SESSION)}&dialect=${name}`);
  const show = (m) => {
    log.textContent += `${m.type !== "message" ? `event: ${m.type}\n` : ""}data: ${m.data}\n\n`;
    if (log.textContent.length > 60000) log.textContent = log.textContent.slice(-40000);
    log.scrollTop = log.scrollHeight;
  };
  raw.onmessage = show;
  for (const t of [...TYPES, "hermes.tool.progress"]) raw.addEventListener(t, show);
});
window.toolstreamState = state;   // for tests and curious people
