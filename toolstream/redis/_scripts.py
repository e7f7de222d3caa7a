"""The Lua scripts RedisBus runs: each is one atomic step on the Redis server, and each
touches the keys of one hash slot only, so the same scripts run on a standalone Redis
and on a Redis Cluster.

Key layout (``P`` is the prefix, ``S`` a session, ``B`` the session's base ``{P:S}``:
its braces make every key of a session hash to one slot):

Per session (slot of ``{P:S}``):

- ``B:s``        the session's events: a stream, one entry per event, field ``e``
                 holding the event's native JSON without its id
- ``B:ep``       the session's incarnation: a token set by its first write. A new one
                 means the session's data was lost (a master lost it, or it expired):
                 its subscribers get a reset instead of a silent gap
- ``B:ck``       the checkpoint: ``id`` (an entry id) and ``state`` (a ``stream.reset``
                 JSON: the session's state after that entry); the stream is trimmed
                 only up to it
- ``B:hw``       per writer token, the highest entry id it wrote (idempotency)
- ``B:open``     the open calls and runs, by writer (closed by a reaper if it is lost)
- ``B:fenced``   calls a reaper closed, or a denial ended, by writer: later events for
                 them are dropped
- ``B:ap:A``     approval A: ``meta`` (its session, expiry, call envelope, writer),
                 ``st`` (``p`` pending, ``r`` resolved), once resolved ``res`` (the
                 resolution's event JSON), ``rid`` (its entry id) and ``dec`` (the
                 decision with the real edited args, for the waiting tool)
- ``B:dn:A``     pushed to when approval A is resolved: the waiting tracker's blocking
                 pop wakes on it

Global (slot of ``{P}``):

- ``{P}:epoch``    the keyspace's epoch token (event ids carry it; a new one means the
                   data was lost and every cursor gets a reset)
- ``{P}:w:T``      writer T's lease (expires unless renewed)
- ``{P}:workers``  the writer tokens that hold or held a lease
- ``{P}:wsess:T``  the sessions writer T wrote to (where a reaper looks)
- ``{P}:lost``     writers being reaped (a reaper that dies half-way is continued)

Every script's first key is ``B:s`` (or ``{P}:workers``): cluster clients route by it.
Entry ids are compared numerically (``ms-n``), never as strings.
"""

from __future__ import annotations

_LE = """
local function le(a, b)
  local am, an = string.match(a, '^(%d+)-(%d+)$')
  local bm, bn = string.match(b, '^(%d+)-(%d+)$')
  am, an, bm, bn = tonumber(am), tonumber(an), tonumber(bm), tonumber(bn)
  return am < bm or (am == bm and an <= bn)
end
"""

#: KEYS: B:s. ARGV: B, token, new incarnation, ttl_s, then records: ``- entry cid json``
#: (an event that neither opens nor ends anything), ``K entry cid rid tool json`` where K
#: is o (opens a call), t (ends it), r (a run starts) or f (a run ends), ``A entry cid
#: json approval_id meta`` (an approval is requested: recorded pending) or ``R entry cid
#: json approval_id`` (a tracker resolves its own approval: written only while it is
#: pending, so the first resolution wins).
#: Returns {incarnation, codes, renumbered}: one code per event, 0 written, 1 already
#: written (a retry), 2 dropped (its call was closed by a reaper), 3 written under another
#: id (another writer's entries were ahead of this writer's clock), those ids in order.
FLUSH = (
    _LE
    + """
local b, token, new_inc = ARGV[1], ARGV[2], ARGV[3]
local ttl = tonumber(ARGV[4])
local key = b .. ':s'
local inc = redis.call('GET', b .. ':ep')
if not inc then
  redis.call('SET', b .. ':ep', new_inc)
  inc = new_inc
end
local open = b .. ':open'
local fenced_key = b .. ':fenced'
local fenced = redis.call('EXISTS', fenced_key) == 1
local mine = redis.call('HGET', b .. ':hw', token) or false
local wrote = false
local codes, moved = {}, {}
local i, n = 5, #ARGV
while i <= n do
  local kind = ARGV[i]
  local id, cid, rid, tool, json, aid, meta
  if kind == '-' then
    id, cid, json = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    i = i + 4
  elseif kind == 'A' then
    id, cid, json, aid, meta = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    i = i + 6
  elseif kind == 'R' then
    id, cid, json, aid = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    i = i + 5
  else
    id, cid, rid, tool, json = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    i = i + 6
  end
  local r = '0'
  local akey = aid and (b .. ':ap:' .. aid) or nil
  if mine and le(id, mine) then
    r = '1'
  elseif kind == 'R' and redis.call('HGET', akey, 'st') == 'r' then
    r = '2'
  elseif fenced and (
      (cid ~= '' and redis.call('SISMEMBER', fenced_key, cjson.encode({'c', token, cid})) == 1)
      or (kind == 'f' and
          redis.call('SISMEMBER', fenced_key, cjson.encode({'r', token, rid})) == 1)) then
    r = '2'
  else
    local written = id
    local ok = redis.pcall('XADD', key, id, 'e', json)
    if type(ok) == 'table' and ok.err then
      written = redis.call('XADD', key, '*', 'e', json)
      r = '3'
      moved[#moved + 1] = written
    end
    -- The high-water mark is in this writer's own numbering (what a retry resends),
    -- not the id an entry was renumbered to: a renumbered entry must not make the
    -- writer's next events look like duplicates.
    mine = id
    wrote = true
    if kind == 'o' then
      redis.call('HSETNX', open, cjson.encode({'c', token, cid}), cjson.encode({tool, rid}))
    elseif kind == 't' then
      redis.call('HDEL', open, cjson.encode({'c', token, cid}))
    elseif kind == 'r' then
      redis.call('HSETNX', open, cjson.encode({'r', token, rid}), '[]')
    elseif kind == 'f' then
      redis.call('HDEL', open, cjson.encode({'r', token, rid}))
    elseif kind == 'A' then
      if redis.call('HSETNX', akey, 'st', 'p') == 1 then
        redis.call('HSET', akey, 'meta', meta)
      end
      redis.call('EXPIRE', akey, ttl)
    elseif kind == 'R' then
      redis.call('HSET', akey, 'st', 'r', 'res', json, 'rid', written,
        'dec', cjson.encode({approved = false, by = 'cancelled'}))
      redis.call('EXPIRE', akey, ttl)
      redis.call('RPUSH', b .. ':dn:' .. aid, '1')
      redis.call('EXPIRE', b .. ':dn:' .. aid, 60)
    end
  end
  codes[#codes + 1] = r
end
if wrote then
  redis.call('HSET', b .. ':hw', token, mine)
  for _, k in ipairs({':s', ':hw', ':ck', ':ep', ':open', ':fenced'}) do
    redis.call('EXPIRE', b .. k, ttl)
  end
end
return {inc, table.concat(codes), moved}
"""
)

#: KEYS: B:s. ARGV: B, upto ('+' or an entry id).
#: Returns {incarnation or '', last-generated id, max-deleted id, checkpoint id or '',
#: checkpoint state or '', entries after the checkpoint up to ``upto``}.
READ_STATE = """
local b, upto = ARGV[1], ARGV[2]
local key = b .. ':s'
local inc = redis.call('GET', b .. ':ep') or ''
local last, maxdel = '0-0', '0-0'
if redis.call('EXISTS', key) == 1 then
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1]
    elseif info[i] == 'max-deleted-entry-id' then maxdel = info[i + 1] end
  end
end
local ck = redis.call('HMGET', b .. ':ck', 'id', 'state')
local from = '-'
if ck[1] then from = '(' .. ck[1] end
local entries = {}
if upto == '+' or not ck[1] or upto ~= ck[1] then
  entries = redis.call('XRANGE', key, from, upto)
end
return {inc, last, maxdel, ck[1] or '', ck[2] or '', entries}
"""

#: KEYS: B:s. ARGV: B, entry id, state JSON, ttl_s, trim id (the id just after the
#: entry). Stores the checkpoint if it is newer than the stored one and trims every
#: entry up to and including it (the checkpoint's state covers them): a reader whose
#: cursor is below the checkpoint therefore missed something. Returns 1 or 0.
CHECKPOINT = (
    _LE
    + """
local b, id, state, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local ckkey = b .. ':ck'
local cur = redis.call('HGET', ckkey, 'id')
if cur and le(id, cur) then return 0 end
redis.call('HSET', ckkey, 'id', id, 'state', state)
redis.call('XTRIM', b .. ':s', 'MINID', ARGV[5])
redis.call('EXPIRE', ckkey, ttl)
return 1
"""
)

#: KEYS: B:s. ARGV: B, cursor (an entry id), count. What a subscription reads:
#: {incarnation or '', checkpoint id or '', up to ``count`` entries after the cursor}.
READ_AFTER = """
local b = ARGV[1]
local inc = redis.call('GET', b .. ':ep') or ''
local ck = redis.call('HGET', b .. ':ck', 'id') or ''
local entries = redis.call('XRANGE', b .. ':s', '(' .. ARGV[2], '+', 'COUNT', ARGV[3])
return {inc, ck, entries}
"""

#: KEYS: {P}:workers. ARGV: {P}, token, force ('1': even if its lease is held).
#: Claims lost writer ``token`` for reaping: {status, sessions} with status ``held``
#: (its lease is alive), ``done`` (reaped already) or ``reap`` and the sessions it wrote
#: to. A claimed writer stays in ``{P}:lost`` until every session is reaped.
CLAIM = """
local g, token, force = ARGV[1], ARGV[2], ARGV[3]
if force ~= '1' and redis.call('EXISTS', g .. ':w:' .. token) == 1 then
  return {'held', {}}
end
local was = redis.call('SREM', g .. ':workers', token)
if was == 0 and redis.call('SISMEMBER', g .. ':lost', token) == 0 then
  return {'done', {}}
end
redis.call('SADD', g .. ':lost', token)
return {'reap', redis.call('SMEMBERS', g .. ':wsess:' .. token)}
"""

#: KEYS: B:s. ARGV: B, session, token, reason, ttl_s.
#: Closes every call (tool.cancelled) and run (run.finished, cancelled) writer ``token``
#: left open in this session, once (each is removed as it is closed, and fenced):
#: returns how many events it wrote.
REAP = """
local b, s, token, reason, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local open = b .. ':open'
local items = redis.call('HGETALL', open)
local t = redis.call('TIME')
local ts = tonumber(t[1]) + tonumber(t[2]) / 1000000
local fenced_key = b .. ':fenced'
local n = 0
local runs = {}
for i = 1, #items, 2 do
  local f = cjson.decode(items[i])
  local kind, who, id = f[1], f[2], f[3]
  if who == token then
    if kind == 'c' then
      local v = cjson.decode(items[i + 1])
      local ev = {v = 1, type = 'tool.cancelled', session = s, ts = ts, call_id = id,
                  tool = v[1], reason = reason}
      if v[2] ~= '' then ev['run_id'] = v[2] end
      redis.call('XADD', b .. ':s', '*', 'e', cjson.encode(ev))
      n = n + 1
    else
      runs[#runs + 1] = id
    end
    redis.call('SADD', fenced_key, items[i])
    redis.call('HDEL', open, items[i])
  end
end
for _, rid in ipairs(runs) do
  local ev = {v = 1, type = 'run.finished', session = s, ts = ts, call_id = '', tool = '',
              run_id = rid, outcome = 'cancelled',
              error = {type = 'WorkerLost', message = reason}}
  redis.call('XADD', b .. ':s', '*', 'e', cjson.encode(ev))
  n = n + 1
end
if n > 0 then
  redis.call('EXPIRE', b .. ':s', ttl)
  redis.call('EXPIRE', fenced_key, ttl)
end
return n
"""

#: KEYS: B:s. ARGV: B, session, approval_id, now, ttl_s, kind (``d`` a decision, ``t``
#: the expiry timer), then for a decision, for an expiry and for a call already closed
#: elsewhere: the resolution's event JSON, the decision JSON, the denial's event JSON
#: (``""``: none). Returns {outcome, resolution JSON, its entry id} with outcome ``ok``,
#: ``expired`` (resolved by timeout now), ``resolved`` (decided before: the winner's JSON
#: and entry id) or ``notfound`` (unknown, or another session's).
RESOLVE = """
local b, s, aid = ARGV[1], ARGV[2], ARGV[3]
local now, ttl, kind = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local key = b .. ':ap:' .. aid
local st = redis.call('HGET', key, 'st')
if not st then return {'notfound', '', ''} end
local meta = cjson.decode(redis.call('HGET', key, 'meta'))
if meta.s ~= s then return {'notfound', '', ''} end
if st == 'r' then
  return {'resolved', redis.call('HGET', key, 'res'), redis.call('HGET', key, 'rid')}
end
local outcome, base = 'ok', 7
local fenced_key = b .. ':fenced'
local call = cjson.encode({'c', meta.w, meta.cid})
if redis.call('SISMEMBER', fenced_key, call) == 1 then
  outcome, base = 'resolved', 13  -- the call was closed elsewhere (a reaper): cancelled
elseif kind == 'd' and meta.exp ~= cjson.null and meta.exp ~= nil and now >= meta.exp then
  outcome, base = 'expired', 10
end
local res, dec, den = ARGV[base], ARGV[base + 1], ARGV[base + 2]
local skey = b .. ':s'
local rid = redis.call('XADD', skey, '*', 'e', res)
if den ~= '' then
  redis.call('XADD', skey, '*', 'e', den)
  redis.call('SADD', fenced_key, call)
  redis.call('EXPIRE', fenced_key, ttl)
  redis.call('HDEL', b .. ':open', call)
end
redis.call('HSET', key, 'st', 'r', 'res', res, 'rid', rid, 'dec', dec)
redis.call('EXPIRE', key, ttl)
redis.call('EXPIRE', skey, ttl)
-- wake the waiting tracker (a blocking pop on B:dn:A), wherever it runs
local wake = b .. ':dn:' .. aid
redis.call('RPUSH', wake, '1')
redis.call('EXPIRE', wake, 60)
return {outcome, res, rid}
"""

#: KEYS: B:s. ARGV: B, session, approval_id. Returns {state, meta, decision} (``""``
#: when unknown or another session's).
APPROVAL = """
local key = ARGV[1] .. ':ap:' .. ARGV[3]
local st = redis.call('HGET', key, 'st')
if not st then return {'', '', ''} end
local meta = redis.call('HGET', key, 'meta')
if cjson.decode(meta).s ~= ARGV[2] then return {'', '', ''} end
return {st, meta, redis.call('HGET', key, 'dec') or ''}
"""
