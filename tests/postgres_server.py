"""A real, throwaway PostgreSQL server on a free loopback port, for the PostgresBus tests.

``initdb`` into a temporary directory, then ``postgres`` listening on 127.0.0.1 only
(its Unix socket in that directory too), ``fsync=off``: the tests never survive a
machine crash, only a server process killed (the kernel keeps what it wrote). The
binaries are found on ``PATH`` or in Debian's ``/usr/lib/postgresql/<version>/bin/``
(the ``postgresql`` package does not put them on ``PATH``). PostgreSQL refuses to run
as root: as root, the server runs as the ``postgres`` user (Debian's package creates
it), else as ``nobody``, in a directory of its own under the system's temp directory
(pytest's are private to root).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.redis_server import PortTaken, free_port, start_on_a_free_port


def _find(name: str) -> str | None:
    """``name`` on PATH, else in the newest ``/usr/lib/postgresql/<version>/bin/``."""
    found = shutil.which(name)
    if found is not None:
        return found
    base = Path("/usr/lib/postgresql")
    versions = []
    if base.is_dir():
        for entry in base.iterdir():
            if re.fullmatch(r"\d+(\.\d+)?", entry.name) and (entry / "bin" / name).exists():
                versions.append((float(entry.name), entry / "bin" / name))
    return str(max(versions)[1]) if versions else None


POSTGRES = _find("postgres")
INITDB = _find("initdb")


def require_postgres() -> None:
    """Skip (or, under TOOLSTREAM_REQUIRE_ALL=1, fail) a test that needs PostgreSQL."""
    from tests.conftest import require

    require(
        POSTGRES is not None and INITDB is not None,
        "PostgreSQL server not installed (Debian: apt install postgresql)",
    )


def _server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL server; a restart (even after SIGKILL) keeps its data and port.

    ``directory`` holds the data unless running as root (then a temporary directory the
    server's user owns, removed by :meth:`close`)."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        assert POSTGRES is not None and INITDB is not None
        self._user = _server_user()
        if self._user is None:
            self.directory = directory
            self._own_dir = False
        else:
            self.directory = Path(tempfile.mkdtemp(prefix="toolstream-pg-"))
            self._own_dir = True
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self.data = self.directory / "data"
        self.sockets = self.directory / "sock"
        self.port = port or free_port()
        self._may_move = port is None  # see RedisServer: a port taken before the bind
        self.proc: subprocess.Popen[bytes] | None = None
        self._initdb()

    @property
    def dsn(self) -> str:
        """A libpq connection string for the server's superuser and database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    url = dsn

    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.pw_gid

    @property
    def _groups(self) -> list[int] | None:
        return None if self._user is None else []

    def _initdb(self) -> None:
        assert INITDB is not None
        self.sockets.mkdir(exist_ok=True)
        if self._user is not None:
            os.chown(self.sockets, self._user.pw_uid, self._user.pw_gid)
        subprocess.run(
            [INITDB, "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "-N"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.directory,
            user=self._uid,
            group=self._gid,
            extra_groups=self._groups,
        )

    def log(self) -> str:
        path = self.directory / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        start_on_a_free_port(self, self._start)

    def _start(self) -> None:
        assert POSTGRES is not None
        args = [
            POSTGRES,
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.sockets),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=400",
            "-c",
            "logging_collector=off",
        ]
        with open(self.directory / "postgres.log", "ab") as log:
            # A session of its own: a SIGKILL reaches the backends too (killed alone, the
            # postmaster leaves them running and a restart finds its shared memory taken).
            self.proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                cwd=self.directory,
                start_new_session=True,
                user=self._uid,
                group=self._gid,
                extra_groups=self._groups,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._ready():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.proc.poll() is None:  # never answered: do not leave it running
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        log_text = self.log()[-3000:]
        if self._may_move and "could not bind" in log_text and "already in use" in log_text:
            (self.directory / "postgres.log").unlink()
            raise PortTaken(self.port)
        raise RuntimeError(f"postgres did not start on port {self.port}:\n{log_text}")

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: a fast shutdown (clients disconnected), or SIGKILL to every
        process of it (``kill``: the crash recovery runs on the next start)."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        if proc.poll() is None:
            if kill:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.send_signal(signal.SIGINT)  # SIGTERM would wait for every client
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if kill:
            # Backends outlive a killed postmaster for a moment: wait for them to go.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                time.sleep(0.02)

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def close(self) -> None:
        """Stop the server and remove the directory it was given of its own."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
