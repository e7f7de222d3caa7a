// toolstream demo page: a reducer over native events, rendered as a conversation:
// the current turn on top with its calls in order (a batch around its calls), earlier
// turns collapsed to one line each; a sub-agent's run inside the card of the call that
// runs it (open while that call runs, one line once it ended). No build step.
"use strict";
const SESSION = new URLSearchParams(location.search).get("session") || "demo";
const TYPES = ["stream.reset", "run.started", "run.finished", "tool.created", "tool.args.delta",
  "tool.ready", "tool.queued", "tool.started", "tool.progress", "tool.output.delta",
  "tool.output.partial", "tool.completed", "tool.failed", "tool.cancelled", "batch.phase",
  "tool.approval.requested", "tool.approval.resolved", "tool.denied",
  "message.started", "message.delta", "message.finished"];
const ORDER = {created: 0, ready: 1, awaiting_approval: 1.5, queued: 2, running: 3,
  completed: 4, failed: 4, cancelled: 4, denied: 4, lost: 4};
const TERMINAL = new Set(["completed", "failed", "cancelled", "denied", "lost"]);
const MAX_FINISHED = 300;    // finished calls kept (every open one is kept)
const MAX_OUTPUT = 4000;     // characters of streamed output kept per call (whole lines)
const MAX_SAID = 4000;       // characters of the agent's text kept per message (the newest)
const OUTSIDE = "";          // the group of calls made outside any turn

const state = {calls: new Map(), runs: new Map(), batches: new Map(), messages: new Map(), lastId: null};
const dirty = new Set();         // call ids to redraw
const dirtyRuns = new Set();     // turn headers to redraw
const dirtyBatches = new Set();  // batch headers to redraw
const dirtyMessages = new Set(); // the agent's messages to redraw
const born = [];                 // calls and messages first seen, in the order they came
let transport = null;

// -- the reducer (what toolstream.LiveView does) -------------------------------------------
function run(id, parentCallId) {   // a turn, or a sub-agent's run (parentCallId: the call it runs under)
  let r = state.runs.get(id);
  if (!r) {
    r = {run_id: id, title: id === OUTSIDE ? "Calls outside a turn" : id, state: id === OUTSIDE ? "" : "running",
         started: null, ended: null, toggled: false, open: true, parent_call_id: null, parent_run_id: null, agent: ""};
    state.runs.set(id, r);
  }
  if (parentCallId && !r.parent_call_id) r.parent_call_id = parentCallId;
  touch(id);
  return r;
}
function isSub(id) { return !!state.runs.get(id)?.parent_call_id; }
function parentRun(r) {   // the run of the call a sub-agent's run is nested under
  const parent = state.calls.get(r.parent_call_id);
  return parent ? parent.run_id : (r.parent_run_id || OUTSIDE);
}
function rootOf(id) {   // the turn a run belongs to, however deep its sub-agents nest
  for (let depth = 0; depth < 32; depth++) {
    const r = state.runs.get(id);
    if (!r || !r.parent_call_id) return id;
    id = parentRun(r);
  }
  return id;
}
function touch(id) {   // a run changed: its header, and the headers of the runs above it (their counts)
  for (let depth = 0; depth < 32; depth++) {
    dirtyRuns.add(id);
    const r = state.runs.get(id);
    if (!r || !r.parent_call_id) return;
    id = parentRun(r);
  }
}
function subrunsOf(callId) { return [...state.runs.values()].filter((r) => r.parent_call_id === callId); }
function call(e) {
  let c = state.calls.get(e.call_id);
  if (!c) {
    c = {call_id: e.call_id, tool: e.tool, run_id: e.run_id || OUTSIDE, batch_id: e.batch_id || null,
         state: "created", fraction: null, message: "", summary: "", error: "", reason: "", args: "",
         output: "", note: "", started: null, ended: null, duration: null, created: e.ts,
         approval: null, decision: "", sending: false, problem: "", parent_call_id: e.parent_call_id || null};
    state.calls.set(e.call_id, c);
    born.push(["call", e.call_id]);
    run(c.run_id, c.parent_call_id);
  }
  if (e.batch_id && !c.batch_id) c.batch_id = e.batch_id;
  return c;
}
function message(e) {   // the agent's text in a turn (message.* events)
  let m = state.messages.get(e.message_id);
  if (!m) {
    m = {message_id: e.message_id, run_id: e.run_id || OUTSIDE, text: "", reasoning: "", finished: false};
    state.messages.set(e.message_id, m);
    born.push(["message", e.message_id]);
    run(m.run_id, e.parent_call_id);
  }
  dirtyMessages.add(m.message_id);
  return m;
}
function advance(c, s, ts) {
  if (ORDER[c.state] > ORDER[s] || (ORDER[c.state] === ORDER[s] && c.state !== "created")) return;
  c.state = s;
  if (s === "running" && !c.started) c.started = ts;
}
function wholeLines(text) {   // the newest MAX_OUTPUT characters, starting at a line
  if (text.length <= MAX_OUTPUT) return text;
  const cut = text.slice(-MAX_OUTPUT);
  const nl = cut.indexOf("\n");
  return nl >= 0 && nl < cut.length - 1 ? cut.slice(nl + 1) : cut;
}
function size(bytes) {
  return bytes < 1024 ? `${bytes} bytes` : bytes < 1048576 ? `${Math.round(bytes / 1024)} KB` : `${(bytes / 1048576).toFixed(1)} MB`;
}
function truncation(result) {   // the payload policy's marker for a result too big to publish
  if (!result || typeof result !== "object" || result.truncated !== true || typeof result.bytes !== "number") return "";
  const shown = typeof result.preview === "string" ? `; a ${size(result.preview.length)} preview was sent` : "";
  return `Result truncated: ${size(result.bytes)}${shown}.`;
}
function apply(e) {
  state.lastId = e.id;
  switch (e.type) {
    case "stream.reset": return reset(e);
    case "run.started": { const r = run(e.run_id, e.parent_call_id);
      Object.assign(r, {title: e.title || e.agent || e.run_id, state: "running", started: e.ts,
        parent_run_id: e.parent_run_id || null, agent: e.agent || ""});
      touch(e.run_id); return; }
    case "run.finished": { const r = run(e.run_id); r.state = e.outcome; r.ended = e.ts; return; }
    case "batch.phase": state.batches.set(e.batch_id, e); dirtyBatches.add(e.batch_id); return;
    case "message.started": message(e); return;
    case "message.delta": { const m = message(e);
      if (e.kind === "reasoning") m.reasoning = (m.reasoning + e.text).slice(-MAX_SAID);
      else m.text = (m.text + e.text).slice(-MAX_SAID);
      return; }
    case "message.finished": message(e).finished = true; return;
  }
  if (!e.call_id) return;
  const c = call(e);
  if (TERMINAL.has(c.state)) return;
  dirty.add(c.call_id); touch(c.run_id);
  if (e.summary) c.summary = e.summary;
  switch (e.type) {
    case "tool.args.delta": c.args = (c.args + e.delta).slice(-300); break;
    case "tool.ready": advance(c, "ready", e.ts); break;
    case "tool.queued": advance(c, "queued", e.ts); break;
    case "tool.started": advance(c, "running", e.ts); break;
    case "tool.progress": advance(c, "running", e.ts); c.fraction = e.fraction ?? c.fraction;
      if (e.message) c.message = e.message; break;
    case "tool.output.delta": advance(c, "running", e.ts); c.output = wholeLines(c.output + e.text); break;
    case "tool.output.partial": advance(c, "running", e.ts); c.output = JSON.stringify(e.value, null, 1).slice(0, MAX_OUTPUT); break;
    case "tool.completed": c.state = "completed"; c.fraction = 1; c.note = truncation(e.result); finish(c, e); break;
    case "tool.failed": c.state = "failed"; c.error = `${e.error.type}: ${e.error.message}`; finish(c, e); break;
    case "tool.cancelled": c.state = "cancelled"; c.reason = e.reason || ""; c.approval = null; finish(c, e); break;
    case "tool.approval.requested":   // a person must decide: the card gets Approve / Deny
      if (!e.running) advance(c, "awaiting_approval", e.ts);
      c.approval = {approval_id: e.approval_id, reason: e.reason || "", expires_at: e.expires_at ?? null};
      c.decision = ""; c.sending = false; c.problem = ""; break;
    case "tool.approval.resolved":
      if (c.approval && c.approval.approval_id !== e.approval_id) break;
      c.approval = null;
      c.decision = decisionText(e.approved, e.by); break;
    case "tool.denied": c.state = "denied"; c.reason = e.reason || ""; c.approval = null;
      if (!c.decision) c.decision = decisionText(false, e.by); finish(c, e); break;
  }
}
function decisionText(approved, by) {
  if (by === "timeout") return "not approved in time";
  if (by === "cancelled") return "";
  return `${approved ? "approved" : "denied"}${by && by !== "anonymous" ? ` by ${by}` : ""}`;
}
function finish(c, e) {   // a denied call never ran: no time shown for it
  c.ended = e.ts; c.duration = e.duration_s; if (!c.started && e.type !== "tool.denied") c.started = e.ts;
}
function reset(e) {
  const present = new Set(e.snapshot.calls.map((c) => c.call_id));
  for (const c of state.calls.values()) {
    if (!present.has(c.call_id) && !TERMINAL.has(c.state)) {   // vanished in a restart
      c.state = "lost"; c.error = "lost in a server restart"; dirty.add(c.call_id); touch(c.run_id);
    }
  }
  const runs = new Set(e.snapshot.runs.map((r) => r.run_id));
  for (const r of state.runs.values()) {
    if (r.state === "running" && r.run_id !== OUTSIDE && !runs.has(r.run_id)) { r.state = "lost"; touch(r.run_id); }
  }
  for (const r of e.snapshot.runs) {   // the tree: a sub-agent's run names the call it runs under
    const t = run(r.run_id, r.parent_call_id);
    Object.assign(t, {title: r.title || r.agent || r.run_id, state: r.state, started: r.started_ts, ended: r.ended_ts,
      parent_run_id: r.parent_run_id || null, agent: r.agent || ""});
  }
  // Calls and the agent's text are placed in the order they were first seen: a page
  // opened mid-turn must show them as the live stream would have, not calls first.
  const items = [...e.snapshot.calls.map((s) => ["call", s]),
    ...(e.snapshot.messages || []).map((s) => ["message", s])];
  items.sort((a, b) => byFirstEvent(a[1], b[1]));
  for (const [kind, s] of items) {
    if (kind === "message") {
      const m = message({message_id: s.message_id, run_id: s.run_id, parent_call_id: s.parent_call_id});
      Object.assign(m, {text: (s.text || "").slice(-MAX_SAID), reasoning: (s.reasoning || "").slice(-MAX_SAID),
        finished: !!s.finished});
      continue;
    }
    const c = call(s);
    Object.assign(c, {state: s.state, fraction: s.fraction, message: s.message || "", summary: s.summary || "",
      output: wholeLines(s.output_text || ""), args: (s.args_text || "").slice(-300), reason: s.reason || "",
      error: s.error ? `${s.error.type}: ${s.error.message}` : "", note: truncation(s.result),
      started: s.started_ts, ended: s.ended_ts, duration: s.duration_s, created: s.created_ts,
      approval: s.approval || null, decision: s.decided_by && !s.approval ? decisionText(s.state !== "denied", s.decided_by) : ""});
    dirty.add(s.call_id); touch(c.run_id);
  }
  for (const b of e.snapshot.batches) { state.batches.set(b.batch_id, b); dirtyBatches.add(b.batch_id); }
  trim();
}
function seqOf(id) {   // the sequence of an event id ("<epoch>-<seq>"), as digits; null if none
  const seq = typeof id === "string" ? id.slice(id.lastIndexOf("-") + 1) : "";
  return /^[0-9]+$/.test(seq) ? seq : null;
}
function byFirstEvent(a, b) {   // by first_event_id's sequence (no BigInt needed: digits compare by length, then text)
  const x = seqOf(a.first_event_id), y = seqOf(b.first_event_id);
  if (x === null || y === null) return (x === null) - (y === null);   // without one: last, in their order
  return x.length - y.length || (x < y ? -1 : x > y ? 1 : 0);
}
function trim() {   // the newest MAX_FINISHED finished calls, and the turns that still hold one
  const finished = [...state.calls.values()].filter((c) => TERMINAL.has(c.state));
  let excess = finished.length - MAX_FINISHED;
  for (const c of finished) {   // oldest first; a call goes with its sub-agents' calls
    if (excess <= 0) break;
    if (state.calls.has(c.call_id)) excess -= drop(c);
  }
  const used = new Set([...state.calls.values()].map((c) => rootOf(c.run_id)));
  for (const m of [...state.messages.values()]) {   // a turn's text goes with its calls
    if (isSub(m.run_id)) continue;   // a sub-agent's text goes with the call it runs under
    if (!used.has(m.run_id) && !(state.runs.get(m.run_id)?.state === "running")) {
      state.messages.delete(m.message_id); els.messages.get(m.message_id)?.remove(); els.messages.delete(m.message_id);
    }
  }
  for (const m of state.messages.values()) used.add(rootOf(m.run_id));
  const newest = [...state.runs.keys()].filter((id) => !isSub(id)).pop();
  for (const r of [...state.runs.values()]) {
    if (!r.parent_call_id && !used.has(r.run_id) && r.state !== "running" && r.run_id !== newest) {
      state.runs.delete(r.run_id); els.turns.get(r.run_id)?.remove(); els.turns.delete(r.run_id);
    }
  }
  const batched = new Set([...state.calls.values()].map((c) => c.batch_id));
  for (const id of [...state.batches.keys()]) {
    if (!batched.has(id)) { state.batches.delete(id); els.batches.get(id)?.remove(); els.batches.delete(id); }
  }
}
function drop(c) {   // forget a call, and its sub-agents' runs with their calls and text; how many calls went
  let n = 1;
  state.calls.delete(c.call_id);
  els.calls.get(c.call_id)?.remove(); els.calls.delete(c.call_id);
  for (const r of subrunsOf(c.call_id)) {
    for (const inner of [...state.calls.values()]) if (inner.run_id === r.run_id) n += drop(inner);
    for (const m of [...state.messages.values()]) {
      if (m.run_id === r.run_id) { state.messages.delete(m.message_id); els.messages.delete(m.message_id); }
    }
    state.runs.delete(r.run_id); els.subruns.delete(r.run_id);
  }
  return n;
}

// -- rendering: only what changed, once per frame -------------------------------------------
const els = {turns: new Map(), subruns: new Map(), batches: new Map(), calls: new Map(), messages: new Map()};
const turnsEl = document.getElementById("turns");
function fmt(s) { return s == null ? "" : s < 1 ? `${Math.round(s * 1000)} ms` : s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`; }
function el(tag, cls, html) { const e = document.createElement(tag); e.className = cls; if (html) e.innerHTML = html; return e; }
function turnEl(id) {
  let t = els.turns.get(id);
  if (!t) {
    t = el("details", "turn", `<summary><span class="turn-title"></span><span class="badge turn-state"></span>
      <span class="turn-counts"></span><span class="turn-time"></span></summary><div class="turn-body"></div>`);
    t.dataset.run = id;
    t.querySelector("summary").addEventListener("click", () => { const r = state.runs.get(id); if (r) r.toggled = true; });
    turnsEl.prepend(t);   // the newest turn on top
    els.turns.set(id, t);
    document.getElementById("empty").hidden = true;
  }
  return t;
}
function subrunEl(id) {   // a sub-agent's run, inside the card of the call that runs it
  let s = els.subruns.get(id);
  if (!s) {
    const r = state.runs.get(id);
    s = el("section", "subrun", `<button type="button" class="sub-toggle" aria-expanded="true">
      <span class="sub-caret" aria-hidden="true"></span><span class="sub-agent"></span><span class="badge sub-state"></span>
      <span class="sub-counts"></span><span class="sub-time"></span></button><div class="sub-body"></div>`);
    s.dataset.run = id;
    const body = s.querySelector(".sub-body"), toggle = s.querySelector(".sub-toggle");
    body.id = `sub-${id}`;
    toggle.setAttribute("aria-controls", body.id);
    toggle.addEventListener("click", () => {
      const r = state.runs.get(id);
      if (r) { r.open = toggle.getAttribute("aria-expanded") !== "true"; r.toggled = true; subHead(r); }
    });
    const parent = r && state.calls.get(r.parent_call_id);
    // Under its call's card; if that call is gone (trimmed), where the call was.
    const home = parent ? card(parent).ui.subruns : bodyOf(r ? parentRun(r) : OUTSIDE);
    home.append(s);
    els.subruns.set(id, s);
  }
  return s;
}
function bodyOf(id) {   // where a run's calls, batches and text go
  return isSub(id) ? subrunEl(id).querySelector(".sub-body") : turnEl(id).querySelector(".turn-body");
}
function batchEl(c) {
  let b = els.batches.get(c.batch_id);
  if (!b) {
    b = el("div", "batch", '<div class="batch-head"></div><div class="batch-calls"></div>');
    b.dataset.batch = c.batch_id;
    bodyOf(c.run_id).append(b);   // where its first call is
    els.batches.set(c.batch_id, b);
    dirtyBatches.add(c.batch_id);
  }
  return b;
}
function text(c) {   // what the card says, in plain words
  switch (c.state) {
    case "created": return "receiving its input…";
    case "ready": return c.summary;
    case "queued": return "waiting for a free slot";
    case "awaiting_approval": return c.summary;
    case "denied": return c.summary || "Not approved";
    case "running": return c.message || c.summary;
    case "failed": return "";
    case "cancelled": return c.summary || (c.reason && c.reason !== "cancelled" ? `Cancelled: ${c.reason}` : "Cancelled");
    case "lost": return "";
    default: return c.summary;
  }
}
function card(c) {
  let e = els.calls.get(c.call_id);
  if (!e) {
    e = el("div", "card", `<div class="top"><span class="tool"></span><span class="badge"></span>
      <span class="id"></span><span class="time"></span></div><div class="bar"><i></i></div>
      <div class="summary"></div><div class="error"></div><div class="note"></div>
      <div class="approval" hidden><span class="ask"></span><span class="expires"></span>
        <button class="approve" type="button">Approve</button><button class="deny" type="button">Deny</button>
        <span class="problem"></span></div>
      <div class="decision"></div><pre class="output"></pre><div class="subruns"></div>`);
    e.querySelector(".approve").addEventListener("click", () => decide(c.call_id, true));
    e.querySelector(".deny").addEventListener("click", () => decide(c.call_id, false));
    e.id = `call-${c.call_id}`;
    // Its own parts, found once: a sub-agent's cards nest inside it with the same classes.
    e.ui = {};
    for (const part of ["tool", "badge", "id", "time", "summary", "error", "note", "approval", "decision", "output", "subruns"]) {
      e.ui[part] = e.querySelector(`.${part}`);
    }
    e.ui.bar = e.querySelector(".bar > i");
    els.calls.set(c.call_id, e);
  }
  const home = c.batch_id ? batchEl(c).querySelector(".batch-calls") : bodyOf(c.run_id);
  if (e.parentElement !== home) home.append(e);   // calls in the order they were made
  const ui = e.ui;
  e.dataset.state = c.state;
  ui.tool.textContent = c.tool;
  ui.badge.innerHTML = (c.state === "running" ? '<span class="spinner"></span>' : "") +
    (c.state === "running" && c.fraction != null ? `running ${Math.round(c.fraction * 100)}%` : c.state);
  ui.bar.style.width = `${Math.round((c.fraction ?? 0) * 100)}%`;
  ui.id.textContent = c.call_id.slice(0, 14);
  ui.summary.textContent = text(c) || "";
  ui.error.textContent = c.state === "failed" ? (c.summary || c.error) : c.state === "lost" ? c.error : "";
  ui.note.textContent = c.note || "";
  const box = ui.approval;
  box.hidden = !c.approval;
  if (c.approval) {
    box.querySelector(".ask").textContent = c.approval.reason ? `Needs your OK: ${c.approval.reason}` : "Needs your OK";
    box.querySelector(".expires").textContent = expiresIn(c);
    for (const b of box.querySelectorAll("button")) b.disabled = !!c.sending;
    box.querySelector(".problem").textContent = c.problem || "";
  }
  ui.decision.textContent = c.state === "denied" ? "" : c.decision || "";   // its summary says it
  const out = ui.output;
  const shown = c.state === "created" ? c.args : c.output;
  if (out.textContent !== shown) { out.textContent = shown; out.scrollTop = out.scrollHeight; }
  ui.time.textContent = elapsed(c);
  return e;
}
function said(m) {   // the agent's text, where it was said among the calls
  let e = els.messages.get(m.message_id);
  if (!e) {
    e = el("div", "said", '<details class="thinking" hidden><summary>reasoning</summary><span></span></details><div class="said-text"></div>');
    e.dataset.message = m.message_id;
    bodyOf(m.run_id).append(e);
    els.messages.set(m.message_id, e);
  }
  e.hidden = !m.text && !m.reasoning;
  e.dataset.finished = m.finished ? "true" : "false";
  const thinking = e.querySelector(".thinking");
  thinking.hidden = !m.reasoning;
  thinking.querySelector("span").textContent = m.reasoning;
  e.querySelector(".said-text").textContent = m.text;
}
function expiresIn(c) {
  if (!c.approval || c.approval.expires_at == null) return "";
  const left = Math.max(0, Math.round(c.approval.expires_at - Date.now() / 1000));
  return `expires in ${left} s`;
}
function elapsed(c) {
  if (c.duration != null) return fmt(c.duration);
  if (!c.started) return "";
  return fmt(Math.max(0, (c.ended || Date.now() / 1000) - c.started));
}
function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }
function inside(id) {   // the calls of a run and of its sub-agents, at any depth
  const runs = new Set([id]);
  for (let grew = true; grew;) {
    grew = false;
    for (const r of state.runs.values()) {
      if (r.parent_call_id && !runs.has(r.run_id) && runs.has(parentRun(r))) { runs.add(r.run_id); grew = true; }
    }
  }
  return [...state.calls.values()].filter((c) => runs.has(c.run_id));
}
function counts(calls) {   // "13 calls · 2 failed · 1 denied"
  const by = {};
  for (const c of calls) by[c.state] = (by[c.state] || 0) + 1;
  const parts = [plural(calls.length, "call")];
  for (const s of ["running", "queued", "awaiting_approval", "failed", "cancelled", "denied", "lost"]) {
    if (by[s]) parts.push(`${by[s]} ${s === "awaiting_approval" ? "awaiting approval" : s}`);
  }
  return parts.join(" · ");
}
function head(r) { if (r.parent_call_id) subHead(r); else turnHead(r); }
function subHead(r) {   // a sub-agent's run: open while its call runs, one line once that call ended
  const s = subrunEl(r.run_id);
  const parent = state.calls.get(r.parent_call_id);
  const open = r.toggled ? r.open : parent ? !TERMINAL.has(parent.state) : r.state === "running";
  const toggle = s.querySelector(".sub-toggle");
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
  s.querySelector(".sub-body").hidden = !open;
  s.dataset.state = r.state;
  s.querySelector(".sub-agent").textContent = r.agent || r.title;
  const badge = s.querySelector(".sub-state");
  badge.innerHTML = (r.state === "running" ? '<span class="spinner"></span>' : "") + r.state;
  s.querySelector(".sub-counts").textContent = counts(inside(r.run_id));
  s.querySelector(".sub-time").textContent = r.started ? fmt(Math.max(0, (r.ended || Date.now() / 1000) - r.started)) : "";
  if (parent) els.calls.get(parent.call_id)?.ui.time.replaceChildren(elapsed(parent));   // its call's clock with it
}
function turnHead(r) {
  const t = turnEl(r.run_id);
  t.dataset.state = r.state;
  t.querySelector(".turn-title").textContent = r.title;
  const badge = t.querySelector(".turn-state");
  badge.hidden = !r.state;
  badge.innerHTML = (r.state === "running" ? '<span class="spinner"></span>' : "") + r.state;
  t.querySelector(".turn-counts").textContent = counts(inside(r.run_id));
  t.querySelector(".turn-time").textContent = r.started ? fmt(Math.max(0, (r.ended || Date.now() / 1000) - r.started)) : "";
}
function batchHead(id) {
  const b = els.batches.get(id), p = state.batches.get(id);
  if (!b) return;
  const calls = [...state.calls.values()].filter((c) => c.batch_id === id);
  const counts = p ? Object.entries(p.counts).map(([k, v]) => `${v} ${k}`).join(", ") : "";
  const phase = p ? (p.phase === "done" ? "done" : p.phase) : "starting";
  b.querySelector(".batch-head").textContent = `${plural(calls.length, "call")} in parallel — ${phase}${counts ? ` (${counts})` : ""}`;
}
function layout() {   // the newest turn open; earlier ones collapsed, unless the reader opened them
  const ids = [...state.runs.keys()].filter((id) => id !== OUTSIDE && !isSub(id));
  const newest = ids[ids.length - 1];
  for (const [id, t] of els.turns) {
    const r = state.runs.get(id);
    if (!r || r.toggled) continue;
    const open = id === newest || r.state === "running" || (id === OUTSIDE && ids.length === 0);
    if (t.open !== open) t.open = open;
  }
}
let lastTick = 0;
function render(now) {
  if (dirty.size && state.calls.size > MAX_FINISHED) trim();   // at most once per frame, when something changed
  for (const [kind, id] of born.splice(0)) {   // placed in the order they came
    if (kind === "call") { const c = state.calls.get(id); if (c) card(c); }
    else { const m = state.messages.get(id); if (m) said(m); }
  }
  for (const id of dirty) {
    const c = state.calls.get(id);
    if (!c) continue;
    card(c);
    if (TERMINAL.has(c.state)) for (const r of subrunsOf(id)) dirtyRuns.add(r.run_id);   // its sub-agents fold
  }
  dirty.clear();
  for (const id of dirtyRuns) { const r = state.runs.get(id); if (r) head(r); }
  for (const id of dirtyBatches) batchHead(id);
  for (const id of dirtyMessages) { const m = state.messages.get(id); if (m) said(m); }
  dirtyMessages.clear();
  if (dirtyRuns.size) layout();
  dirtyRuns.clear(); dirtyBatches.clear();
  if (now - lastTick > 200) {   // keep running clocks moving
    lastTick = now;
    for (const c of state.calls.values()) {
      if (c.state === "running") els.calls.get(c.call_id)?.ui.time.replaceChildren(elapsed(c));
      if (c.approval) els.calls.get(c.call_id)?.ui.approval.querySelector(".expires").replaceChildren(expiresIn(c));
    }
    for (const r of state.runs.values()) if (r.state === "running") head(r);
  }
  requestAnimationFrame(render);
}
requestAnimationFrame(render);

// -- transports: both resume from the last id ------------------------------------------------
async function decide(callId, approved) {   // a person's decision, over the page's own transport
  const c = state.calls.get(callId);
  if (!c || !c.approval || c.sending) return;
  c.sending = true; c.problem = ""; dirty.add(callId);
  try {
    await transport.decide(c.approval.approval_id, approved);
  } catch (err) {
    c.problem = String(err.message || err);
  }
  c.sending = false; dirty.add(callId);
}
function refusal(code, message) {   // what a refused decision means to the reader
  if (code === "already_resolved") return "someone decided already";
  if (code === "expired") return "too late: the approval expired";
  if (code === "forbidden") return "you may not decide this";
  return message || code;
}
function setStatus(text, cls) { const s = document.getElementById("status"); s.textContent = text; s.className = `status ${cls}`; }
function onEvent(data) { apply(data); }

function openSSE() {
  const q = new URLSearchParams({session: SESSION});
  if (state.lastId) q.set("last_event_id", state.lastId);
  const source = new EventSource(`/events?${q}`);   // the browser resumes with Last-Event-ID itself
  for (const t of TYPES) source.addEventListener(t, (m) => onEvent(JSON.parse(m.data)));
  source.onopen = () => setStatus("live (SSE)", "live");
  source.onerror = () => setStatus("reconnecting…", "down");
  const decide = async (approvalId, approved) => {   // POST on the stream's own path
    const r = await fetch(`/events?${new URLSearchParams({session: SESSION})}`, {
      method: "POST", headers: {"content-type": "application/json"},
      body: JSON.stringify({approval_id: approvalId, approved})});
    if (!r.ok) { const body = await r.json().catch(() => ({})); throw new Error(refusal(body.code, body.error)); }
  };
  return {close: () => source.close(), decide};
}
function openWS() {
  let ws = null, closed = false, delay = 250;
  const waiting = new Map();   // approval id -> [resolve, reject] of a decision sent
  const connect = () => {
    // Offering "toolstream.batch": the server may send several events in one message.
    ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`, ["toolstream.batch"]);
    ws.onopen = () => {
      delay = 250;
      const sub = {op: "subscribe", session: SESSION};
      if (state.lastId) sub.after = state.lastId;
      ws.send(JSON.stringify(sub));
      setStatus("live (WebSocket)", "live");
    };
    const handle = (msg) => {
      if (msg.op === "ping") ws.send('{"op":"pong"}');
      else if (msg.op === "event") onEvent(msg.data);
      else if ((msg.op === "approved" || msg.op === "error") && waiting.has(msg.approval_id)) {
        const [ok, fail] = waiting.get(msg.approval_id); waiting.delete(msg.approval_id);
        if (msg.op === "approved") ok(); else fail(new Error(refusal(msg.code, msg.message)));
      }
    };
    ws.onmessage = (m) => {
      const parsed = JSON.parse(m.data);
      for (const msg of Array.isArray(parsed) ? parsed : [parsed]) handle(msg);   // a batch: an array
    };
    ws.onclose = () => {
      if (closed) return;
      setStatus("reconnecting…", "down");
      setTimeout(connect, delay); delay = Math.min(delay * 2, 3000);
    };
  };
  connect();
  const decide = (approvalId, approved) => new Promise((ok, fail) => {
    if (!ws || ws.readyState !== WebSocket.OPEN) { fail(new Error("not connected")); return; }
    waiting.set(approvalId, [ok, fail]);
    ws.send(JSON.stringify({op: "approve", session: SESSION, approval_id: approvalId, approved}));
  });
  return {close: () => { closed = true; ws && ws.close(); }, decide};
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
