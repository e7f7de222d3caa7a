"""The tables PostgresBroker keeps (per ``prefix``) and the statements it runs on them.

- ``<p>_meta``: one row: the epoch (every event id carries it; it is created once and
  survives restarts), and when the history was last trimmed and the idle sessions last
  deleted (so that, of every process, one looks per period).
- ``<p>_sessions``: a row per session: its incarnation (set by its first write), the
  last seq ever given in it, the floor (the highest seq deleted), the checkpoint (its
  seq and ``stream.reset`` JSON) and when it was last written. Every write to a session
  locks this row first: writes to one session happen one at a time, in every process.
- ``<p>_events``: the events, ``(session, seq)`` → ``blob`` (the event's native JSON
  without its id) and when it was written (the retention is by that time).
- ``<p>_marks``: each writer's high-water mark per session (a retried batch is
  recognised, not written twice).
- ``<p>_open``: the calls (``c``) and runs (``r``) a writer opened in a session and has
  not ended (what a reaper closes if the writer is lost).
- ``<p>_fenced``: the calls and runs closed by a reaper, or ended by a denial, by
  writer: later events for them are dropped.
- ``<p>_approvals``: per session and approval id: ``p`` pending or ``r`` resolved, the
  request's meta, and once resolved the resolution's JSON, its seq and the decision.
- ``<p>_writers``: each writer's lease (its expiry, by the database's clock), whether it
  holds one (``held``) and whether a reaper claimed it (``lost``, until reaped).
- ``<p>_writer_sessions``: the sessions each writer wrote to (where a reaper looks).

- ``<p>_append_v1(...)``: :meth:`~toolstream._core.driver.Broker.append` as a PL/pgSQL
  function (one statement per batch on the hot path).

Statements are composed once, with the table names quoted, as ``bytes``.
"""

from __future__ import annotations

from psycopg import sql
from typing_extensions import LiteralString

__all__ = ["Statements"]

_TABLES = (
    "meta",
    "sessions",
    "events",
    "marks",
    "open",
    "fenced",
    "approvals",
    "writers",
    "writer_sessions",
)

_DDL: tuple[LiteralString, ...] = (
    """CREATE TABLE IF NOT EXISTS {meta} (
        id integer PRIMARY KEY CHECK (id = 1),
        epoch text NOT NULL,
        trimmed_at timestamptz NOT NULL DEFAULT '-infinity',
        expired_at timestamptz NOT NULL DEFAULT '-infinity')""",
    """CREATE TABLE IF NOT EXISTS {sessions} (
        session text PRIMARY KEY,
        incarnation text NOT NULL DEFAULT '',
        last bigint NOT NULL DEFAULT 0,
        floor bigint NOT NULL DEFAULT 0,
        ck_seq bigint NOT NULL DEFAULT 0,
        ck_state text,
        written_at timestamptz NOT NULL DEFAULT now())""",
    """CREATE TABLE IF NOT EXISTS {events} (
        session text NOT NULL,
        seq bigint NOT NULL,
        blob text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (session, seq))""",
    "CREATE INDEX IF NOT EXISTS {events_written_at} ON {events} (written_at)",
    """CREATE TABLE IF NOT EXISTS {marks} (
        session text NOT NULL,
        writer text NOT NULL,
        hw bigint NOT NULL,
        PRIMARY KEY (session, writer))""",
    """CREATE TABLE IF NOT EXISTS {open} (
        session text NOT NULL,
        writer text NOT NULL,
        kind text NOT NULL,
        id text NOT NULL,
        tool text NOT NULL DEFAULT '',
        run_id text NOT NULL DEFAULT '',
        opened bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (session, writer, kind, id))""",
    """CREATE TABLE IF NOT EXISTS {fenced} (
        session text NOT NULL,
        writer text NOT NULL,
        kind text NOT NULL,
        id text NOT NULL,
        PRIMARY KEY (session, writer, kind, id))""",
    """CREATE TABLE IF NOT EXISTS {approvals} (
        session text NOT NULL,
        approval_id text NOT NULL,
        status text NOT NULL,
        meta text NOT NULL,
        writer text NOT NULL DEFAULT '',
        call_id text NOT NULL DEFAULT '',
        expires double precision,
        res text,
        rid bigint,
        dec text,
        PRIMARY KEY (session, approval_id))""",
    """CREATE TABLE IF NOT EXISTS {writers} (
        token text PRIMARY KEY,
        expires timestamptz NOT NULL,
        held boolean NOT NULL,
        lost boolean NOT NULL DEFAULT false)""",
    """CREATE TABLE IF NOT EXISTS {writer_sessions} (
        token text NOT NULL,
        session text NOT NULL,
        PRIMARY KEY (token, session))""",
    # Broker.append, in the database (the hot path: one statement per batch, where the
    # steps as statements from Python cost 3-5x the CPU): Redis's FLUSH script, record by
    # record. Arguments: the session, the writer, the incarnation a first write sets,
    # the records as arrays (kind, the writer's seq, blob, call id, run id, tool,
    # approval id, meta), the NOTIFY payload of the session ('' wakes every reader) and
    # the decision a tracker's withdrawal records. Returns the incarnation, the codes
    # (one digit per record) and the seqs of the renumbered records.
    """CREATE OR REPLACE FUNCTION {append}(
        p_session text, p_token text, p_inc text, p_kinds text[], p_seqs bigint[],
        p_blobs text[], p_cids text[], p_rids text[], p_tools text[], p_aids text[],
        p_metas text[], p_payload text, p_cancelled text)
    RETURNS TABLE (incarnation text, codes text, moved bigint[])
    LANGUAGE plpgsql AS $fn$
    DECLARE
        n integer := coalesce(array_length(p_kinds, 1), 0);
        v_inc text; v_last bigint; v_mark bigint; v_now bigint; v_seq bigint;
        v_moved bigint[] := ARRAY[]::bigint[];
        -- Filled in place (an array grown by || is copied at every step: quadratic).
        v_codes text[] := array_fill('0'::text, ARRAY[n]);
        w_seqs bigint[] := array_fill(NULL::bigint, ARRAY[n]);
        v_fenced boolean; v_wrote boolean := false; k text; i integer; m json;
        v_note text;
    BEGIN
        -- Lock the session's row (created, with its incarnation, by its first write):
        -- one writer at a time per session, whatever the process.
        INSERT INTO {sessions} AS s (session, incarnation) VALUES (p_session, p_inc)
            ON CONFLICT (session) DO UPDATE SET incarnation = EXCLUDED.incarnation
            WHERE s.incarnation = '';
        SELECT s.incarnation, s.last INTO v_inc, v_last
            FROM {sessions} s WHERE s.session = p_session;
        SELECT hw INTO v_mark FROM {marks} WHERE session = p_session AND writer = p_token;
        v_fenced := EXISTS (SELECT 1 FROM {fenced}
            WHERE session = p_session AND writer = p_token);
        v_now := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
        FOR i IN 1 .. n LOOP
            k := p_kinds[i];
            IF v_mark IS NOT NULL AND p_seqs[i] <= v_mark THEN
                v_codes[i] := '1';  -- written already: a retried batch
                CONTINUE;
            END IF;
            -- (Nested IFs: a condition that reads a table starts the executor each
            -- time it is evaluated, even when a cheap test before it fails.)
            IF k = 'R' THEN
                IF EXISTS (SELECT 1 FROM {approvals} WHERE session = p_session
                        AND approval_id = p_aids[i] AND status = 'r') THEN
                    v_codes[i] := '2';  -- its approval was resolved already: first wins
                    CONTINUE;
                END IF;
            END IF;
            IF v_fenced THEN
                IF (p_cids[i] <> '' AND EXISTS (SELECT 1 FROM {fenced}
                        WHERE session = p_session AND writer = p_token
                        AND kind = 'c' AND id = p_cids[i]))
                    OR (k = 'f' AND EXISTS (SELECT 1 FROM {fenced}
                        WHERE session = p_session AND writer = p_token
                        AND kind = 'r' AND id = p_rids[i])) THEN
                    v_codes[i] := '2';  -- its call or run was closed elsewhere
                    CONTINUE;
                END IF;
            END IF;
            IF p_seqs[i] > v_last THEN
                v_seq := p_seqs[i];
            ELSE  -- another writer is ahead: the next seq, by the database's clock
                v_seq := GREATEST(v_now * 1000000, v_last + 1);
                v_codes[i] := '3';
                v_moved := v_moved || v_seq;
            END IF;
            v_last := v_seq;
            v_mark := p_seqs[i];  -- in the writer's own numbering (what it resends)
            w_seqs[i] := v_seq;
            v_wrote := true;
            CONTINUE WHEN k = '-';
            IF k = 'o' THEN
                INSERT INTO {open} (session, writer, kind, id, tool, run_id, opened)
                    VALUES (p_session, p_token, 'c', p_cids[i], p_tools[i], p_rids[i], v_seq)
                    ON CONFLICT DO NOTHING;
            ELSIF k = 't' THEN
                DELETE FROM {open} WHERE session = p_session AND writer = p_token
                    AND kind = 'c' AND id = p_cids[i];
            ELSIF k = 'r' THEN
                INSERT INTO {open} (session, writer, kind, id, opened)
                    VALUES (p_session, p_token, 'r', p_rids[i], v_seq)
                    ON CONFLICT DO NOTHING;
            ELSIF k = 'f' THEN
                DELETE FROM {open} WHERE session = p_session AND writer = p_token
                    AND kind = 'r' AND id = p_rids[i];
            ELSIF k = 'A' THEN
                m := p_metas[i]::json;
                INSERT INTO {approvals}
                    (session, approval_id, status, meta, writer, call_id, expires)
                    VALUES (p_session, p_aids[i], 'p', p_metas[i],
                        coalesce(m->>'w', p_token), coalesce(m->>'cid', p_cids[i]),
                        (m->>'exp')::double precision)
                    ON CONFLICT DO NOTHING;
            ELSIF k = 'R' THEN
                UPDATE {approvals} SET status = 'r', res = p_blobs[i], rid = v_seq,
                    dec = p_cancelled
                    WHERE session = p_session AND approval_id = p_aids[i];
                v_note := json_build_array(p_session, p_aids[i])::text;
                PERFORM pg_notify({approvals_channel},
                    CASE WHEN octet_length(v_note) < 7000 THEN v_note ELSE '' END);
            END IF;
        END LOOP;
        IF v_wrote THEN
            INSERT INTO {events} (session, seq, blob)
                SELECT p_session, w.seq, w.blob FROM unnest(w_seqs, p_blobs) AS w(seq, blob)
                WHERE w.seq IS NOT NULL;
            INSERT INTO {marks} (session, writer, hw) VALUES (p_session, p_token, v_mark)
                ON CONFLICT (session, writer) DO UPDATE SET hw = EXCLUDED.hw;
            UPDATE {sessions} SET last = GREATEST(last, v_last), written_at = now()
                WHERE session = p_session;
            PERFORM pg_notify({events_channel}, p_payload);
        END IF;
        RETURN QUERY SELECT v_inc, array_to_string(v_codes, ''), v_moved;
    END
    $fn$""",
)

_STATEMENTS: dict[str, LiteralString] = {
    # -- schema and epoch -------------------------------------------------------------
    "schema_lock": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "schema_present": """SELECT bool_and(to_regclass(n) IS NOT NULL)
        AND to_regprocedure(%s) IS NOT NULL FROM unnest(%b::text[]) n""",
    "append": """SELECT * FROM {append}(%s, %s, %s, %b::text[], %b::bigint[], %b::text[],
        %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %s, %s)""",
    "epoch_insert": "INSERT INTO {meta} (id, epoch) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
    "epoch": "SELECT epoch FROM {meta} WHERE id = 1",
    # -- what resolve and reap write (append is the function above) --------------------
    "lock": "SELECT last FROM {sessions} WHERE session = %s FOR UPDATE",
    # The database's clock, in ms, read after the lock: what the seq of an event the
    # driver writes on its own (renumbered, a reaper's, a decision's) follows.
    "now_ms": "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    "insert_events": """INSERT INTO {events} (session, seq, blob)
        SELECT %s, * FROM unnest(%b::bigint[], %b::text[])""",
    "open_delete": """DELETE FROM {open} WHERE session = %s AND writer = %s
        AND (kind, id) IN (SELECT * FROM unnest(%b::text[], %b::text[]))""",
    "session_written": """UPDATE {sessions} SET last = GREATEST(last, %s), written_at = now()
        WHERE session = %s""",
    "notify": "SELECT pg_notify(%s, %s)",
    "fence": """INSERT INTO {fenced} (session, writer, kind, id)
        SELECT %s, %s, * FROM unnest(%b::text[], %b::text[]) ON CONFLICT DO NOTHING""",
    # -- reading ----------------------------------------------------------------------
    # One statement each: one snapshot (the session's row and its events agree).
    "read_after": """SELECT s.incarnation, s.ck_seq, e.seq, e.blob FROM {sessions} s
        LEFT JOIN LATERAL (SELECT seq, blob FROM {events}
            WHERE session = s.session AND seq > %s ORDER BY seq LIMIT %s) e ON true
        WHERE s.session = %s ORDER BY e.seq""",
    "read_state": """SELECT s.incarnation, s.last, s.floor, s.ck_seq, s.ck_state, e.seq, e.blob
        FROM {sessions} s
        LEFT JOIN LATERAL (SELECT seq, blob FROM {events}
            WHERE session = s.session AND seq > s.ck_seq AND seq <= %s ORDER BY seq) e ON true
        WHERE s.session = %s ORDER BY e.seq""",
    # Stores the checkpoint unless a newer one is, and deletes what it covers.
    "checkpoint": """WITH s AS (
            UPDATE {sessions} SET ck_seq = %s, ck_state = %s, floor = GREATEST(floor, %s)
            WHERE session = %s AND ck_seq < %s RETURNING session)
        DELETE FROM {events} e USING s WHERE e.session = s.session AND e.seq <= %s""",
    # -- approvals --------------------------------------------------------------------
    "approval": """SELECT status, meta, dec FROM {approvals}
        WHERE session = %s AND approval_id = %s""",
    "approval_for_update": """SELECT a.status, a.res, a.rid, a.expires, a.writer, a.call_id,
            EXISTS (SELECT 1 FROM {fenced} f WHERE f.session = a.session
                AND f.writer = a.writer AND f.kind = 'c' AND f.id = a.call_id)
        FROM {approvals} a WHERE a.session = %s AND a.approval_id = %s""",
    "approval_decided": """UPDATE {approvals} SET status = 'r', res = %s, rid = %s, dec = %s
        WHERE session = %s AND approval_id = %s""",
    # -- leases (the database's clock, so hosts' clocks are never compared) ----------
    "hold": """INSERT INTO {writers} (token, expires, held)
        VALUES (%s, clock_timestamp() + make_interval(secs => %s), true)
        ON CONFLICT (token) DO UPDATE SET expires = EXCLUDED.expires, held = true""",
    "file_sessions": """INSERT INTO {writer_sessions} (token, session)
        SELECT %s, unnest(%b::text[]) ON CONFLICT DO NOTHING""",
    "lost": """SELECT token FROM {writers} WHERE token <> %s
        AND (lost OR (held AND expires < clock_timestamp())) ORDER BY token""",
    "claim_lock": """SELECT held, lost, expires > clock_timestamp() FROM {writers}
        WHERE token = %s FOR UPDATE""",
    "claim": "UPDATE {writers} SET held = false, lost = true WHERE token = %s",
    "writer_sessions": "SELECT session FROM {writer_sessions} WHERE token = %s ORDER BY session",
    "forget_sessions": "DELETE FROM {writer_sessions} WHERE token = %s",
    "forget_writer": "DELETE FROM {writers} WHERE token = %s AND NOT held",
    "unclaim": "UPDATE {writers} SET lost = false WHERE token = %s",
    "drop_lease": "UPDATE {writers} SET expires = '-infinity' WHERE token = %s",
    # -- reaping ----------------------------------------------------------------------
    "open_of": """SELECT kind, id, tool, run_id FROM {open} WHERE session = %s AND writer = %s
        ORDER BY opened, kind, id""",
    "open_clear": "DELETE FROM {open} WHERE session = %s AND writer = %s",
    # -- retention --------------------------------------------------------------------
    "trim_gate": """UPDATE {meta} SET trimmed_at = now()
        WHERE id = 1 AND trimmed_at <= now() - make_interval(secs => %s) RETURNING 1""",
    "trim_due": """SELECT session, max(seq) FROM {events}
        WHERE written_at < now() - make_interval(secs => %s) GROUP BY session ORDER BY session""",
    "expire_gate": """UPDATE {meta} SET expired_at = now()
        WHERE id = 1 AND expired_at <= now() - make_interval(secs => %s) RETURNING 1""",
    "expire": """WITH gone AS (
            DELETE FROM {sessions} WHERE written_at < now() - make_interval(secs => %s)
            RETURNING session),
        e AS (DELETE FROM {events} WHERE session IN (SELECT session FROM gone)),
        m AS (DELETE FROM {marks} WHERE session IN (SELECT session FROM gone)),
        o AS (DELETE FROM {open} WHERE session IN (SELECT session FROM gone)),
        f AS (DELETE FROM {fenced} WHERE session IN (SELECT session FROM gone)),
        a AS (DELETE FROM {approvals} WHERE session IN (SELECT session FROM gone))
        SELECT count(*) FROM gone""",
}


class Statements:
    """Every statement of one ``prefix``, composed (``bytes``), in :attr:`q` by name;
    the DDL, the quoted relation names and the NOTIFY channels."""

    def __init__(self, prefix: str) -> None:
        names = {t: f"{prefix}_{t}" for t in _TABLES}
        names["events_written_at"] = f"{prefix}_events_written_at"
        idents: dict[str, sql.Composable] = {k: sql.Identifier(v) for k, v in names.items()}
        #: The quoted names of the tables and the index (for ``to_regclass``).
        self.relations = [i.as_string(None) for i in idents.values()]
        # The append function's name carries its version: a later one is a new function.
        append = sql.Identifier(f"{prefix}_append_v1")
        idents["append"] = append
        #: Its signature (for ``to_regprocedure``).
        self.append_signature = append.as_string(None) + (
            "(text, text, text, text[], bigint[], text[], text[], text[], text[], text[],"
            " text[], text, text)"
        )
        #: The key of the advisory lock that guards creating the tables.
        self.schema_key = f"toolstream:{prefix}"
        #: NOTIFY channels: a session was written to (payload: the session, or "" for
        #: every session); an approval was resolved (payload: JSON [session, id]).
        self.events_channel = f"{prefix}_events"
        self.approvals_channel = f"{prefix}_approvals"
        idents["events_channel"] = sql.Literal(self.events_channel)
        idents["approvals_channel"] = sql.Literal(self.approvals_channel)
        self.listen = [
            sql.SQL("LISTEN {}").format(sql.Identifier(ch)).as_bytes(None)
            for ch in (self.events_channel, self.approvals_channel)
        ]
        self.ddl = [sql.SQL(text).format(**idents).as_bytes(None) for text in _DDL]
        #: The statements by name.
        self.q = {k: sql.SQL(t).format(**idents).as_bytes(None) for k, t in _STATEMENTS.items()}
