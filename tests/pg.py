"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp dir, loopback only.

The project's set-up installs PostgreSQL (tools/install_system_packages.sh); tests
start their own cluster, owned by the ``postgres`` user when they run as
root (the server refuses root), listening on 127.0.0.1 and a unix socket in
the temp dir, with fsync off (it is thrown away). Stopped and removed at the
end of the session, also after a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

USER, PASSWORD = "leaky", "s3cret"


def find_bindir() -> str | None:
    """Where initdb and pg_ctl live, or None if PostgreSQL is not installed."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")):
            return candidate
    initdb = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(initdb)) if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running throwaway cluster."""

    def __init__(self, bindir: str, base: str, port: int, as_user: list[str]) -> None:
        self.bindir, self.base, self.port, self._as = bindir, base, port, as_user
        self.data, self.sockets = os.path.join(base, "data"), os.path.join(base, "sockets")

    def run(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as, os.path.join(self.bindir, tool), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def psql(self, sql: str, database: str = "postgres", timeout: float = 120) -> str:
        return self.run(
            "psql",
            "-h",
            self.sockets,
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
            timeout=timeout,
        ).stdout

    extra_options = ""  # server options beyond the common ones (a standby names itself)

    def url(self, database: str, password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.run(
            "pg_ctl",
            "-D",
            self.data,
            "-l",
            os.path.join(self.base, "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.sockets} -F -c max_connections=200{self.extra_options}",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")


@contextlib.contextmanager
def server() -> Iterator[Server]:
    """Start a cluster; yield it; stop and remove it (whatever happened)."""
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (tools/install_system_packages.sh installs it)")
    base = tempfile.mkdtemp(prefix="leakypool-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    srv = Server(bindir, base, _free_port(), as_user)
    started = False
    try:
        os.makedirs(srv.sockets, exist_ok=True)
        if as_user:
            os.chown(srv.sockets, pwd.getpwnam("postgres").pw_uid, pwd.getpwnam("postgres").pw_gid)
        srv.run(
            "initdb",
            "-D",
            srv.data,
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
            "-E",
            "UTF8",
        )
        srv.start()
        started = True
        srv.psql(f"CREATE USER {USER} PASSWORD '{PASSWORD}' CREATEDB")
        yield srv
    finally:
        if started:
            with contextlib.suppress(Exception):
                srv.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


class Standby(Server):
    """A streaming standby of a `Server` (``pg_basebackup -R``), on its own port; promotable."""

    extra_options = " -c cluster_name=standby1"  # the name the primary's synchronous_standby_names lists

    def promote(self) -> None:
        self.run("pg_ctl", "-D", self.data, "-w", "-t", "60", "promote")


def postmaster_pid(srv: Server) -> int:
    """The server's postmaster pid (its first line of postmaster.pid)."""
    with open(os.path.join(srv.data, "postmaster.pid")) as f:
        return int(f.readline())


@contextlib.contextmanager
def replicated(primary: Server, *, synchronous: bool = True) -> Iterator[Standby]:
    """A streaming standby of ``primary`` (running), synchronous by default; stopped and removed at the end."""
    base = tempfile.mkdtemp(prefix="leakypool-pg-standby-")
    if primary._as:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
    standby = Standby(primary.bindir, base, _free_port(), primary._as)
    started = False
    try:
        os.makedirs(standby.sockets, exist_ok=True)
        if primary._as:
            os.chown(standby.sockets, pwd.getpwnam("postgres").pw_uid, pwd.getpwnam("postgres").pw_gid)
        standby.run(
            "pg_basebackup",
            "-D",
            standby.data,
            "-h",
            primary.sockets,
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "--no-sync",
            "--checkpoint=fast",
        )
        standby.start()
        started = True
        if synchronous:
            primary.psql("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
            primary.psql("SELECT pg_reload_conf()")
        yield standby
    finally:
        if started:
            with contextlib.suppress(Exception):
                standby.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)
