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
)

_STATEMENTS: dict[str, LiteralString] = {
    # -- schema and epoch -------------------------------------------------------------
    "schema_lock": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "schema_present": "SELECT bool_and(to_regclass(n) IS NOT NULL) FROM unnest(%s::text[]) n",
    "epoch_insert": "INSERT INTO {meta} (id, epoch) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
    "epoch": "SELECT epoch FROM {meta} WHERE id = 1",
    # -- appending --------------------------------------------------------------------
    # Locks the session's row (inserting it on its first write, with its incarnation);
    # RETURNING yields nothing for a known session, hence the select after it.
    "lock_new": """INSERT INTO {sessions} AS s (session, incarnation) VALUES (%s, %s)
        ON CONFLICT (session) DO UPDATE SET incarnation = EXCLUDED.incarnation
        WHERE s.incarnation = ''""",
    "session": "SELECT incarnation, last FROM {sessions} WHERE session = %s",
    "lock": "SELECT last FROM {sessions} WHERE session = %s FOR UPDATE",
    # The database's clock, in ms, read after the lock: what the seq of an event the
    # driver writes on its own (renumbered, a reaper's, a decision's) follows.
    "now_ms": "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    "mark": "SELECT hw FROM {marks} WHERE session = %s AND writer = %s",
    "fenced_of": """SELECT kind, id FROM {fenced} WHERE session = %s AND writer = %s
        AND ((kind = 'c' AND id = ANY(%s::text[])) OR (kind = 'r' AND id = ANY(%s::text[])))""",
    "statuses": """SELECT approval_id, status FROM {approvals}
        WHERE session = %s AND approval_id = ANY(%s::text[])""",
    "insert_events": """INSERT INTO {events} (session, seq, blob)
        SELECT %s, * FROM unnest(%s::bigint[], %s::text[])""",
    "open_delete": """DELETE FROM {open} WHERE session = %s AND writer = %s
        AND (kind, id) IN (SELECT * FROM unnest(%s::text[], %s::text[]))""",
    "open_insert": """INSERT INTO {open} (session, writer, kind, id, tool, run_id, opened)
        SELECT %s, %s, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],
            %s::bigint[])
        ON CONFLICT DO NOTHING""",
    "open_replace": """INSERT INTO {open} (session, writer, kind, id, tool, run_id, opened)
        SELECT %s, %s, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],
            %s::bigint[])
        ON CONFLICT (session, writer, kind, id) DO UPDATE SET tool = EXCLUDED.tool,
            run_id = EXCLUDED.run_id, opened = EXCLUDED.opened""",
    "approval_insert": """INSERT INTO {approvals}
        (session, approval_id, status, meta, writer, call_id, expires, res, rid, dec)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING""",
    "approval_resolved": """UPDATE {approvals} SET status = 'r', res = %s, rid = %s, dec = %s
        WHERE session = %s AND approval_id = %s""",
    "mark_set": """INSERT INTO {marks} (session, writer, hw) VALUES (%s, %s, %s)
        ON CONFLICT (session, writer) DO UPDATE SET hw = EXCLUDED.hw""",
    "session_written": """UPDATE {sessions} SET last = GREATEST(last, %s), written_at = now()
        WHERE session = %s""",
    "notify": "SELECT pg_notify(%s, %s)",
    "fence": """INSERT INTO {fenced} (session, writer, kind, id)
        SELECT %s, %s, * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING""",
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
        SELECT %s, unnest(%s::text[]) ON CONFLICT DO NOTHING""",
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
        idents = {k: sql.Identifier(v) for k, v in names.items()}
        #: The quoted names of the tables and the index (for ``to_regclass``).
        self.relations = [i.as_string(None) for i in idents.values()]
        #: The key of the advisory lock that guards creating the tables.
        self.schema_key = f"toolstream:{prefix}"
        self.ddl = [sql.SQL(text).format(**idents).as_bytes(None) for text in _DDL]
        #: NOTIFY channels: a session was written to (payload: the session, or "" for
        #: every session); an approval was resolved (payload: JSON [session, id]).
        self.events_channel = f"{prefix}_events"
        self.approvals_channel = f"{prefix}_approvals"
        self.listen = [
            sql.SQL("LISTEN {}").format(sql.Identifier(ch)).as_bytes(None)
            for ch in (self.events_channel, self.approvals_channel)
        ]
        #: The statements by name.
        self.q = {k: sql.SQL(t).format(**idents).as_bytes(None) for k, t in _STATEMENTS.items()}
