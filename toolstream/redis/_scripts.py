"""The Lua scripts RedisBus runs: each is one atomic step on the Redis server.

Key layout (``P`` is the prefix, ``S`` a session):

- ``P:epoch``        the keyspace's epoch token (event ids carry it; a new one means
                     the data was lost and every cursor gets a reset)
- ``P:s:S``          the session's events: a stream, one entry per event, field ``e``
                     holding the event's native JSON without its id
- ``P:ck:S``         the session's checkpoint: ``id`` (an entry id) and ``state`` (a
                     ``stream.reset`` JSON: the session's state after that entry);
                     the stream is trimmed only up to it
- ``P:hw:S``         per writer token, the highest entry id it wrote (idempotency)
- ``P:w:T``          writer T's lease (expires unless renewed)
- ``P:workers``      the writer tokens that hold or held a lease
- ``P:open:T``       writer T's open calls and runs (closed by a reaper if T is lost)
- ``P:fenced:T``     calls of T a reaper closed, or a denial ended: later events for
                     them are dropped
- ``P:ap:A``         approval A: ``meta`` (its session, expiry, call envelope, writer),
                     ``st`` (``p`` pending, ``r`` resolved), once resolved ``res`` (the
                     resolution's event JSON), ``rid`` (its entry id) and ``dec`` (the
                     decision with the real edited args, for the waiting tool)
- ``P:dn:A``         pushed to when approval A is resolved: the waiting tracker's
                     blocking pop wakes on it

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

#: ARGV: prefix, token, new_epoch, ttl_s, lease_ms, then records:
#: ``S session`` (the session of the events that follow), ``- entry cid json`` (an event
#: that neither opens nor ends anything), ``K entry cid rid tool json`` where K is
#: o (opens a call), t (ends it), r (a run starts) or f (a run ends), ``A entry cid
#: json approval_id meta`` (an approval is requested: recorded pending) or ``R entry cid
#: json approval_id`` (a tracker resolves its own approval: written only while it is
#: pending, so the first resolution wins).
#: Returns {epoch, codes, renumbered}: one code per event, 0 written, 1 already written
#: (a retry), 2 dropped (its call was closed by a reaper), 3 written under another id
#: (another writer's entries were ahead of this writer's clock), those ids in order.
FLUSH = (
    _LE
    + """
local p, token, new_epoch = ARGV[1], ARGV[2], ARGV[3]
local ttl, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local epoch = redis.call('GET', p .. ':epoch')
if not epoch then
  redis.call('SET', p .. ':epoch', new_epoch)
  epoch = new_epoch
end
redis.call('SET', p .. ':w:' .. token, '1', 'PX', lease)
redis.call('SADD', p .. ':workers', token)
local open = p .. ':open:' .. token
local fenced_key = p .. ':fenced:' .. token
local fenced = redis.call('EXISTS', fenced_key) == 1
local hw, wrote = {}, {}
local codes, moved = {}, {}
local s, key, mine = nil, nil, false
local i, n = 6, #ARGV
while i <= n do
  local kind = ARGV[i]
  if kind == 'S' then
    s = ARGV[i + 1]
    key = p .. ':s:' .. s
    mine = hw[s]
    if mine == nil then
      mine = redis.call('HGET', p .. ':hw:' .. s, token) or false
      hw[s] = mine
    end
    i = i + 2
  else
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
    local akey = aid and (p .. ':ap:' .. aid) or nil
    if mine and le(id, mine) then
      r = '1'
    elseif kind == 'R' and redis.call('HGET', akey, 'st') == 'r' then
      r = '2'
    elseif fenced and (
        (cid ~= '' and redis.call('SISMEMBER', fenced_key, cjson.encode({'c', s, cid})) == 1)
        or (kind == 'f' and
            redis.call('SISMEMBER', fenced_key, cjson.encode({'r', s, rid})) == 1)) then
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
      hw[s] = id
      wrote[s] = true
      if kind == 'o' then
        redis.call('HSETNX', open, cjson.encode({'c', s, cid}), cjson.encode({tool, rid}))
      elseif kind == 't' then
        redis.call('HDEL', open, cjson.encode({'c', s, cid}))
      elseif kind == 'r' then
        redis.call('HSETNX', open, cjson.encode({'r', s, rid}), '[]')
      elseif kind == 'f' then
        redis.call('HDEL', open, cjson.encode({'r', s, rid}))
      elseif kind == 'A' then
        if redis.call('HSETNX', akey, 'st', 'p') == 1 then
          redis.call('HSET', akey, 'meta', meta)
        end
        redis.call('EXPIRE', akey, ttl)
      elseif kind == 'R' then
        redis.call('HSET', akey, 'st', 'r', 'res', json, 'rid', written,
          'dec', cjson.encode({approved = false, by = 'cancelled'}))
        redis.call('EXPIRE', akey, ttl)
        redis.call('RPUSH', p .. ':dn:' .. aid, '1')
        redis.call('EXPIRE', p .. ':dn:' .. aid, 60)
      end
    end
    codes[#codes + 1] = r
  end
end
for ws, _ in pairs(wrote) do
  redis.call('HSET', p .. ':hw:' .. ws, token, hw[ws])
  redis.call('EXPIRE', p .. ':s:' .. ws, ttl)
  redis.call('EXPIRE', p .. ':hw:' .. ws, ttl)
  redis.call('EXPIRE', p .. ':ck:' .. ws, ttl)
end
redis.call('EXPIRE', open, ttl)
return {epoch, table.concat(codes), moved}
"""
)

#: ARGV: prefix, session, upto ('+' or an entry id).
#: Returns {epoch or '', last-generated id, max-deleted id, checkpoint id or '',
#: checkpoint state or '', entries after the checkpoint up to ``upto``}.
READ_STATE = """
local p, s, upto = ARGV[1], ARGV[2], ARGV[3]
local key = p .. ':s:' .. s
local epoch = redis.call('GET', p .. ':epoch') or ''
local last, maxdel = '0-0', '0-0'
if redis.call('EXISTS', key) == 1 then
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1]
    elseif info[i] == 'max-deleted-entry-id' then maxdel = info[i + 1] end
  end
end
local ck = redis.call('HMGET', p .. ':ck:' .. s, 'id', 'state')
local from = '-'
if ck[1] then from = '(' .. ck[1] end
local entries = {}
if upto == '+' or not ck[1] or upto ~= ck[1] then
  entries = redis.call('XRANGE', key, from, upto)
end
return {epoch, last, maxdel, ck[1] or '', ck[2] or '', entries}
"""

#: ARGV: prefix, session, entry id, state JSON, ttl_s, trim id (the id just after the
#: entry). Stores the checkpoint if it is newer than the stored one and trims every
#: entry up to and including it (the checkpoint's state covers them): a reader whose
#: cursor is below the checkpoint therefore missed something. Returns 1 or 0.
CHECKPOINT = (
    _LE
    + """
local p, s, id, state, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local ckkey = p .. ':ck:' .. s
local cur = redis.call('HGET', ckkey, 'id')
if cur and le(id, cur) then return 0 end
redis.call('HSET', ckkey, 'id', id, 'state', state)
redis.call('XTRIM', p .. ':s:' .. s, 'MINID', ARGV[6])
redis.call('EXPIRE', ckkey, ttl)
return 1
"""
)

#: ARGV: prefix, session, cursor (an entry id), count. What a subscription reads:
#: {epoch or '', checkpoint id or '', up to ``count`` entries after the cursor}.
READ_AFTER = """
local p, s = ARGV[1], ARGV[2]
local epoch = redis.call('GET', p .. ':epoch') or ''
local ck = redis.call('HGET', p .. ':ck:' .. s, 'id') or ''
local entries = redis.call('XRANGE', p .. ':s:' .. s, '(' .. ARGV[3], '+', 'COUNT', ARGV[4])
return {epoch, ck, entries}
"""

#: ARGV: prefix, token, reason, ttl_s, force ('1': even if its lease is held).
#: Closes every call (tool.cancelled) and run (run.finished, cancelled) writer
#: ``token`` left open, once: returns how many events it wrote, or -1 if the lease
#: is still held.
REAP = """
local p, token, reason, ttl, force = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
if force ~= '1' and redis.call('EXISTS', p .. ':w:' .. token) == 1 then return -1 end
local open = p .. ':open:' .. token
local items = redis.call('HGETALL', open)
local t = redis.call('TIME')
local ts = tonumber(t[1]) + tonumber(t[2]) / 1000000
local fenced_key = p .. ':fenced:' .. token
local n = 0
local runs = {}
for i = 1, #items, 2 do
  local f = cjson.decode(items[i])
  local kind, s, id = f[1], f[2], f[3]
  if kind == 'c' then
    local v = cjson.decode(items[i + 1])
    local ev = {v = 1, type = 'tool.cancelled', session = s, ts = ts, call_id = id,
                tool = v[1], reason = reason}
    if v[2] ~= '' then ev['run_id'] = v[2] end
    redis.call('XADD', p .. ':s:' .. s, '*', 'e', cjson.encode(ev))
    redis.call('SADD', fenced_key, cjson.encode({'c', s, id}))
    redis.call('EXPIRE', p .. ':s:' .. s, ttl)
    n = n + 1
  else
    runs[#runs + 1] = {s, id}
  end
end
for _, r in ipairs(runs) do
  local ev = {v = 1, type = 'run.finished', session = r[1], ts = ts, call_id = '', tool = '',
              run_id = r[2], outcome = 'cancelled',
              error = {type = 'WorkerLost', message = reason}}
  redis.call('XADD', p .. ':s:' .. r[1], '*', 'e', cjson.encode(ev))
  redis.call('SADD', fenced_key, cjson.encode({'r', r[1], r[2]}))
  n = n + 1
end
redis.call('DEL', open)
redis.call('SREM', p .. ':workers', token)
redis.call('EXPIRE', fenced_key, ttl)
return n
"""

#: ARGV: prefix, session, approval_id, now, ttl_s, kind (``d`` a decision, ``t`` the
#: expiry timer), then for a decision, for an expiry and for a call already closed
#: elsewhere: the resolution's event JSON, the decision JSON, the denial's event JSON
#: (``""``: none). Returns {outcome, resolution JSON, its entry id, epoch} with outcome
#: ``ok``, ``expired`` (resolved by timeout now), ``resolved`` (decided before: the
#: winner's JSON and entry id) or ``notfound`` (unknown, or another session's).
RESOLVE = """
local p, s, aid = ARGV[1], ARGV[2], ARGV[3]
local now, ttl, kind = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local key = p .. ':ap:' .. aid
local epoch = redis.call('GET', p .. ':epoch') or ''
local st = redis.call('HGET', key, 'st')
if not st then return {'notfound', '', '', epoch} end
local meta = cjson.decode(redis.call('HGET', key, 'meta'))
if meta.s ~= s then return {'notfound', '', '', epoch} end
if st == 'r' then
  return {'resolved', redis.call('HGET', key, 'res'), redis.call('HGET', key, 'rid'), epoch}
end
local outcome, base = 'ok', 7
local fenced_key = p .. ':fenced:' .. meta.w
local call = cjson.encode({'c', s, meta.cid})
if redis.call('SISMEMBER', fenced_key, call) == 1 then
  outcome, base = 'resolved', 13  -- the call was closed elsewhere (a reaper): cancelled
elseif kind == 'd' and meta.exp ~= cjson.null and meta.exp ~= nil and now >= meta.exp then
  outcome, base = 'expired', 10
end
local res, dec, den = ARGV[base], ARGV[base + 1], ARGV[base + 2]
local skey = p .. ':s:' .. s
local rid = redis.call('XADD', skey, '*', 'e', res)
if den ~= '' then
  redis.call('XADD', skey, '*', 'e', den)
  redis.call('SADD', fenced_key, call)
  redis.call('EXPIRE', fenced_key, ttl)
  redis.call('HDEL', p .. ':open:' .. meta.w, call)
end
redis.call('HSET', key, 'st', 'r', 'res', res, 'rid', rid, 'dec', dec)
redis.call('EXPIRE', key, ttl)
redis.call('EXPIRE', skey, ttl)
-- wake the waiting tracker (a blocking pop on P:dn:A), wherever it runs
local wake = p .. ':dn:' .. aid
redis.call('RPUSH', wake, '1')
redis.call('EXPIRE', wake, 60)
return {outcome, res, rid, epoch}
"""

#: ARGV: prefix, session, approval_id. Returns {state, meta, decision} (``""`` when
#: unknown or another session's).
APPROVAL = """
local key = ARGV[1] .. ':ap:' .. ARGV[3]
local st = redis.call('HGET', key, 'st')
if not st then return {'', '', ''} end
local meta = redis.call('HGET', key, 'meta')
if cjson.decode(meta).s ~= ARGV[2] then return {'', '', ''} end
return {st, meta, redis.call('HGET', key, 'dec') or ''}
"""
