"""Opening a job store: files and URLs that are not a store, newer schemas, unreachable servers.

The contract of a store once open is in ../test_store.py (the contract suite); these are the ways `open` refuses,
and the ways it must not (several processes creating one file at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading

import pytest

import pool
from pool._jobs._store import NewJob
from pool._jobs._stores._postgres import PostgresStore
from pool._jobs._stores._sqlite import SCHEMA_VERSION, SQLiteStore
from tests.unit.pool._jobs.test_store import NOW, job, opened


class TestSQLiteFiles:
    async def test_open_should_refuse_what_is_not_a_leakypool_store_in_one_line(self, tmp_path):
        """Test each unusable file fails at open with a ConfigError naming the path."""
        (tmp_path / "text").write_text("not a database\n" * 200)
        with contextlib.closing(sqlite3.connect(tmp_path / "foreign.db")) as foreign, foreign:
            foreign.execute("CREATE TABLE users (id INTEGER)")
        for name, message in [
            ("text", "not a SQLite database"),
            ("foreign.db", "not a leakypool job store"),
            ("missing-dir/jobs.db", "unable to open"),
            ("", "is a directory"),
        ]:
            store = SQLiteStore(str(tmp_path / name))
            with pytest.raises(pool.ConfigError, match=message) as info:
                await store.open()
            assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
        assert threading.active_count() >= 1  # (and no store thread left behind: the autouse check)

    @pytest.mark.parametrize(
        ("plant", "message"),
        [
            ("mode_db", r"jobs\.db is writable by other users \(mode 0666\): chmod go-w"),
            ("mode_wal", r"jobs\.db-wal is writable by other users"),
            ("mode_dir", r"the directory .* is writable by other users \(mode 1777\).*not /tmp"),
            ("owner_dir", r"the directory .* belongs to uid 65534"),
            ("owner_db", r"jobs\.db belongs to uid 65534, neither this user"),
            ("link", r"jobs\.db is not a regular file"),
        ],
    )
    async def test_open_should_refuse_a_file_or_directory_another_user_could_write(self, tmp_path, plant, message):
        """Test issue 51 finding 3: a store, its -wal or its directory that another user made or may write is
        refused before it is opened (what the other user could have planted there runs as this user)."""
        place = tmp_path / "place"
        place.mkdir(mode=0o700)
        path = place / "jobs.db"
        async with opened("sqlite", place):  # a genuine store first, so the planted part is the only fault
            pass
        if plant == "mode_db":
            path.chmod(0o666)
        elif plant == "mode_wal":
            (place / "jobs.db-wal").write_bytes(b"")
            (place / "jobs.db-wal").chmod(0o666)
        elif plant == "mode_dir":
            place.chmod(0o1777)
        elif plant == "owner_dir":
            if os.getuid() != 0:
                pytest.skip("only root can give a directory to another user")
            os.chown(place, 65534, 65534)
        elif plant == "owner_db":
            if os.getuid() != 0:
                pytest.skip("only root can give a file to another user")
            os.chown(path, 65534, 65534)
        else:
            path.rename(place / "real.db")
            path.symlink_to(place / "real.db")
        store = SQLiteStore(str(path))
        with pytest.raises(pool.ConfigError, match=message):
            await store.open()

    async def test_open_should_refuse_a_newer_schema_and_leave_it_untouched(self, tmp_path):
        """Test that a database from a newer release is refused, not damaged."""
        path = tmp_path / "jobs.db"
        async with opened("sqlite", tmp_path):
            pass
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE leakypool_schema SET version = ?", (SCHEMA_VERSION + 1,))
        before = path.read_bytes()
        with pytest.raises(pool.ConfigError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
            await SQLiteStore(str(path)).open()
        assert path.read_bytes() == before

    async def test_full_disk_should_fail_submit_with_store_error_and_write_nothing(self, tmp_path):
        """Test a full database (SQLite's max_page_count): StoreError, no half-written job, recovery after."""
        async with opened("sqlite", tmp_path) as store:
            await store.submit(job("small"))
            pages = (await store._run(lambda db: db.execute("PRAGMA page_count").fetchone(), write=False))[0]
            await store._run(lambda db: db.execute(f"PRAGMA max_page_count = {pages}"), write=False)
            big = NewJob("big", "mod.fn", b"x" * 200_000, NOW, NOW + 60)
            with pytest.raises(pool.StoreError, match="full"):
                await store.submit(big)
            assert await store.get("big") is None
            await store._run(lambda db: db.execute("PRAGMA max_page_count = 1073741823"), write=False)
            assert (await store.submit(big))[1]

    def test_from_url_should_read_an_absolute_path(self):
        """Test the URL forms docs/stores.md uses."""
        assert SQLiteStore.from_url("sqlite:///var/lib/app/jobs.db").path == "/var/lib/app/jobs.db"
        assert SQLiteStore.from_url("sqlite:////var/lib/app/jobs.db").path == "/var/lib/app/jobs.db"
        for bad in ("sqlite:///", "sqlite://host/x.db", "postgres://x"):
            with pytest.raises(pool.ConfigError, match="expected sqlite:///"):
                SQLiteStore.from_url(bad)


class TestPostgresStore:
    async def test_open_should_fail_in_one_line_when_unreachable_or_refused(self, postgres_server, postgres_url):
        """Test an unreachable server (StoreError: out of reach, for now) and wrong credentials (ConfigError:
        it cannot work): one line each, the password redacted."""
        from tests import pg

        closed_port = f"postgresql://{pg.USER}:{pg.PASSWORD}@127.0.0.1:1/nope"
        wrong_password = postgres_server.url(postgres_url.rsplit("/", 1)[1], password="wrong-password")
        for url, error, message in [
            (closed_port, pool.StoreError, "cannot connect"),
            (wrong_password, pool.ConfigError, "password authentication failed"),
        ]:
            with pytest.raises(error, match=message) as info:
                await PostgresStore(url).open()
            text = str(info.value)
            assert "\n" not in text and pg.PASSWORD not in text and "wrong-password" not in text

    async def test_open_should_refuse_a_newer_schema_and_leave_it_untouched(self, postgres_server, postgres_url):
        """Test that a database from a newer release is refused, not damaged."""
        store = PostgresStore(postgres_url)
        await store.open()
        await store.submit(job("kept"))
        await store.close()
        database = postgres_url.rsplit("/", 1)[1]
        postgres_server.psql("UPDATE leakypool_schema SET version = version + 1", database)
        with pytest.raises(pool.ConfigError, match="is newer than this release"):
            await PostgresStore(postgres_url).open()
        assert postgres_server.psql("SELECT id FROM leakypool_jobs", database).split() == ["kept"]


class TestSQLiteOpen:
    async def test_open_should_wait_for_peers_opening_a_new_file_at_the_same_moment(self, tmp_path):
        """Test several processes' stores (here: connections) creating one fresh file at once: no 'locked'."""
        for i in range(20):
            path = str(tmp_path / f"fresh{i}.db")
            stores = [SQLiteStore(path) for _ in range(4)]
            try:
                await asyncio.gather(*(store.open() for store in stores))
            finally:
                await asyncio.gather(*(store.close() for store in stores))


@pytest.mark.filterwarnings("error::ResourceWarning")
class TestConnectionsClosed:
    """Every connection a store opens is closed by `close`, and on every way `open` can fail (the `connections`
    fixture records them; Python 3.13 warns on one the garbage collector finds open, in whatever test runs then)."""

    async def test_close_should_close_every_connection_open_made(self, backend, tmp_path, connections):
        async with opened(backend, tmp_path) as store:
            await store.submit(job("a"))
            assert connections.still_open()
        assert connections.closed_and_collected() >= 1

    async def test_a_refused_open_should_close_its_connection(self, tmp_path, connections):
        (tmp_path / "text").write_text("not a database\n" * 200)
        with pytest.raises(pool.ConfigError, match="not a SQLite database"):
            await SQLiteStore(str(tmp_path / "text")).open()
        assert connections.closed_and_collected() == 1

    async def test_a_cancelled_open_should_close_its_connection(self, tmp_path, connections):
        """Test an open cancelled while it waits for another process's write lock (the schema check)."""
        path = tmp_path / "jobs.db"
        async with opened("sqlite", tmp_path):
            pass
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            opening = asyncio.ensure_future(SQLiteStore(str(path)).open())
            for _ in range(200):  # until the store's thread has its connection (and waits for the lock)
                if len(connections.still_open()) == 2:
                    break
                await asyncio.sleep(0.01)
            assert len(connections.still_open()) == 2
            opening.cancel()
            await asyncio.sleep(0.05)  # the cancelled open is closing the store by now (it waits for the lock)
            holder.execute("COMMIT")
            with pytest.raises(asyncio.CancelledError):
                await opening
        assert connections.closed_and_collected() == 3

    async def test_a_refused_postgres_open_should_close_its_connections(
        self, postgres_server, postgres_url, connections
    ):
        """Test a newer schema (refused after the pool connected)."""
        async with opened(("postgres", postgres_url), None):
            pass
        postgres_server.psql("UPDATE leakypool_schema SET version = version + 1", postgres_url.rsplit("/", 1)[1])
        with pytest.raises(pool.ConfigError, match="is newer than this release"):
            await PostgresStore(postgres_url).open()
        assert connections.closed_and_collected() >= 2
