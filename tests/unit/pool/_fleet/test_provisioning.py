"""Tests for pool._fleet._provisioning: what provisioned and spawned workers are told, and `Growth`'s bookkeeping.

A fake provisioner stands in for a cloud API: it records each request and
succeeds, fails or waits as the test says. No worker process starts here
(the local fleet is built, never opened).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import logging
import pickle
import threading
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backpressure import TaskCountBackpressure
from pool._config._settings import PoolConfig, WorkerConfig
from pool._errors import ConfigError, SerializationError
from pool._fleet._local_fleet import LocalFleet
from pool._fleet._provision import SubprocessProvisioner, WorkerRequest
from pool._fleet._provisioning import FORWARDED, Growth, pool_capacity, worker_env, worker_request

WAIT_S = 30.0
"""Bound on every wait (a request task runs within a loop turn or two; this is for a loaded machine)."""

REGISTRY = "postgresql://db.example/leakypool"


class Provisioner:
    """A remote provisioner: records requests; each one fails with ``error`` if set, or waits for ``release``."""

    def __init__(self, error: Exception | None = None, *, hold: bool = False) -> None:
        self.requests: list[WorkerRequest] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.error = error
        self.hold = hold
        self.closed = 0
        self.worker_tls = ("/etc/w/cert.pem", "/etc/w/key.pem", "/etc/w/ca.pem")

    async def provision(self, request: WorkerRequest) -> None:
        self.requests.append(request)
        self.arrived.set()
        if self.hold:
            await self.release.wait()
        if self.error is not None:
            raise self.error

    async def aclose(self) -> None:
        self.closed += 1

    def __repr__(self) -> str:
        return "Provisioner(token=postgresql://u:hunter2@db/x)"

    async def requested(self, count: int) -> list[WorkerRequest]:
        """Wait until ``count`` requests arrived."""
        async with asyncio.timeout(WAIT_S):
            while len(self.requests) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.requests


def fleet(minimum: int = 0, maximum: int = 0) -> LocalFleet:
    return LocalFleet(
        env={},
        minimum=minimum,
        maximum=maximum,
        idle_timeout=1.0,
        startup_timeout=1.0,
        shutdown_grace=1.0,
        on_ready=lambda metadata: None,
        on_exit=lambda uid, why: None,
    )


class Members(set[uuid.UUID]):
    """The pool's member uids, as `Growth` reads them (``members()``)."""

    def __call__(self) -> set[uuid.UUID]:
        return set(self)


def growth(provisioner: Provisioner | None, members: Members, *, max_workers: int = 3, timeout: float = 60.0) -> Growth:
    def request(uid: uuid.UUID, seq: int) -> WorkerRequest:
        return WorkerRequest(uid=uid, env={}, args=(), seq=seq)

    return Growth(
        fleet(),
        provisioner,
        max_workers=max_workers,
        provision_timeout=timeout,
        members=members,
        request=request,
    )


def capacity(provisioner, *, minimum: int = 1, timeout: float | None = None, registry: str = REGISTRY, **kwargs):
    return pool_capacity(
        PoolConfig(max_workers=4, idle_timeout=7.0),
        None,
        provisioner,
        minimum=minimum,
        provision_timeout=timeout,
        members=Members(),
        registry=registry,
        tags=("gpu",),
        on_ready=lambda metadata: None,
        on_exit=lambda uid, why: None,
        **kwargs,
    )


class Secret:
    """A `SecretSource` stand-in: the pool's secret."""

    def get(self, *, create: bool = False) -> str:
        assert create  # provisioned workers need one: the pool makes it if it has none yet
        return "pool secret"


def hook(ctx) -> bool:  # a backpressure hook, pickled by reference
    return True


FORWARDED_VALUES = {
    "MAX_CONCURRENT_TASKS": st.integers(0, 64).map(str),
    "BACKPRESSURE": st.just(base64.b64encode(pickle.dumps(hook)).decode()),
    "SHUTDOWN_GRACE": st.floats(0.0, 100.0).map(repr),
    "HOLD_SLOT_WHILE_WAITING": st.sampled_from(["0", "1"]),
}
assert set(FORWARDED_VALUES) == set(FORWARDED)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[str, str, str]:
    """Three readable files (a worker checks its TLS files can be read; their content is not read here)."""
    folder = tmp_path_factory.mktemp("tls")
    paths = tuple(str(folder / name) for name in ("cert.pem", "key.pem", "ca.pem"))
    for path in paths:
        open(path, "w").close()
    return paths  # type: ignore[return-value]


class TestWorkerRequest:
    @settings(deadline=None)  # parsing a worker's settings twice: slow on a loaded machine, never wrong
    @given(
        forwarded=st.fixed_dictionaries({}, optional=FORWARDED_VALUES),
        tags=st.frozensets(st.sampled_from(["gpu", "big", "eu"])),
        which_tls=st.sampled_from(["none", "all", "no client ca"]),
        password=st.booleans(),
        idle=st.floats(0.5, 1000.0),
    )
    def test_flags_and_variables_should_give_the_same_worker_settings(
        self, tls_files, forwarded, tags, which_tls, password, idle
    ):
        """Test that a worker started with the request's flags and one started with its variables are configured
        alike, whatever is forwarded; and that no password or secret is ever in a flag."""
        tls = {"none": (), "all": tls_files, "no client ca": (*tls_files[:2], "")}[which_tls]
        registry = "postgresql://u:hunter2@db/x" if password else REGISTRY
        spawned = {f"LEAKYPOOL_{k}": v for k, v in forwarded.items()}
        uid = uuid.UUID(int=5)
        request = worker_request(
            uid, 0, spawned, registry=registry, tags=tags, idle_timeout=idle, tls=tls, secret="s3cret"
        )
        from_env = WorkerConfig.from_env(request.env)
        from_args = WorkerConfig.from_argv(
            list(request.args), environ={k: v for k, v in request.env.items() if k == "LEAKYPOOL_REGISTRY"}
        )
        assert dataclasses.replace(from_env, secret="") == from_args
        assert from_args.uid == str(uid) and from_args.idle_timeout == idle
        assert from_args.tags == tuple(sorted(tags)) and from_args.registry == registry
        assert from_args.tls_cert == (tls[0] if tls else "")
        assert from_env.secret == "s3cret"
        assert not any("hunter2" in arg or "s3cret" in arg for arg in request.args)

    def test_worker_request_should_leave_out_empty_settings(self):
        """Test that no registry, no tags, no TLS and no secret add nothing (the worker's defaults hold)."""
        request = worker_request(
            uuid.UUID(int=1), 4, {"LEAKYPOOL_BACKPRESSURE": ""}, registry="", tags=(), idle_timeout=3.0
        )
        assert request.env == {"LEAKYPOOL_UID": str(uuid.UUID(int=1)), "LEAKYPOOL_IDLE_TIMEOUT": "3.0"}
        assert request.args == ("--uid", str(uuid.UUID(int=1)), "--idle-timeout", "3.0")
        assert request.seq == 4


class TestWorkerEnv:
    def test_a_task_count_hook_should_become_the_worker_capacity(self):
        """Test that the built-in hook ships as a number (nothing unpickled in the worker)."""
        config = WorkerConfig.from_env(worker_env(TaskCountBackpressure(4), PoolConfig()))
        assert config.max_concurrent_tasks == 4 and config.backpressure == ""

    def test_any_other_hook_should_ship_pickled_with_no_capacity(self):
        env = worker_env(hook, PoolConfig())
        config = WorkerConfig.from_env(env)
        assert config.max_concurrent_tasks == 0
        assert pickle.loads(base64.b64decode(config.backpressure)) is hook

    def test_worker_env_should_carry_the_pool_settings_and_the_spawn_key(self):
        config = PoolConfig(max_tasks_per_worker=9, shutdown_grace=4.0, hold_slot_while_waiting=True)
        env = worker_env(None, config, "spawn key")
        worker = WorkerConfig.from_env(env)
        assert (worker.max_tasks, worker.shutdown_grace, worker.hold_slot_while_waiting) == (9, 4.0, True)
        assert worker.max_concurrent_tasks == 0 and worker.backpressure == ""
        assert env["LEAKYPOOL_SECRET"] == "spawn key"
        assert worker.log_level == "WARNING"

    def test_an_unpicklable_hook_should_raise_a_serialization_error_naming_it(self):
        with pytest.raises(SerializationError, match="backpressure hook"):
            worker_env(functools.partial(hook, threading.Lock()), PoolConfig())  # a lock cannot be pickled


class TestPoolCapacity:
    @pytest.mark.parametrize("timeout", [0, -1.0, True, "60", float("nan")])
    def test_a_bad_provision_timeout_should_raise_config_error(self, timeout):
        with pytest.raises(ConfigError, match="provision_timeout"):
            capacity(None, timeout=timeout)

    def test_a_remote_provisioner_without_a_registry_should_raise_config_error_redacted(self):
        """Test that workers a provisioner starts need a registry to join through; the message hides secrets."""
        with pytest.raises(ConfigError, match="StoreDiscovery") as error:
            capacity(Provisioner(), registry="")
        assert "hunter2" not in str(error.value)

    def test_a_local_pool_should_grow_its_fleet_up_to_max_workers(self):
        local_fleet, grown = capacity(None, minimum=2)
        assert (local_fleet.minimum, local_fleet.maximum) == (2, 4)
        assert isinstance(grown.provisioner, SubprocessProvisioner) and grown.maximum == 4

    def test_a_remote_provisioner_should_keep_the_local_fleet_at_its_minimum(self):
        local_fleet, grown = capacity(Provisioner(), minimum=1)
        assert local_fleet.maximum == 1
        assert grown.maximum == 4
        assert grown.plan.provision_timeout == 120.0  # PROVISION_TIMEOUT_S

    async def test_requests_should_carry_the_provisioner_tls_files_and_the_pool_secret(self):
        """Test that ``worker_tls`` and the pool's secret reach each request, with the pool's registry and tags."""
        provisioner = Provisioner()
        _, grown = capacity(provisioner, secret=Secret())
        try:
            assert grown.grow()
            (request,) = await provisioner.requested(1)
        finally:
            await grown.aclose()
        env = request.env
        assert env["LEAKYPOOL_TLS_CERT"] == "/etc/w/cert.pem" and env["LEAKYPOOL_TLS_CLIENT_CA"] == "/etc/w/ca.pem"
        assert env["LEAKYPOOL_SECRET"] == "pool secret"
        assert env["LEAKYPOOL_REGISTRY"] == REGISTRY and env["LEAKYPOOL_TAGS"] == "gpu"
        assert env["LEAKYPOOL_IDLE_TIMEOUT"] == "7.0"

    def test_an_unpicklable_initializer_should_raise_a_serialization_error(self):
        with pytest.raises(SerializationError, match="initializer"):
            capacity(None, initializer=(print, (threading.Lock(),)))


@pytest.fixture
def members() -> Iterator[Members]:
    yield Members()


class TestGrowth:
    async def test_grow_should_request_workers_up_to_max_workers_counting_members(self, members):
        """Test that requests stop at ``max_workers`` minus members, each numbered, each reaching the provisioner."""
        provisioner = Provisioner()
        members.add(uuid.uuid4())
        grown = growth(provisioner, members, max_workers=3)
        try:
            assert [grown.grow() for _ in range(4)] == [True, True, False, False]
            requests = await provisioner.requested(2)
            assert [r.seq for r in requests] == [0, 1] and grown.requested == 2
            assert len({r.uid for r in requests}) == 2
        finally:
            await grown.aclose()
        assert provisioner.closed == 1

    async def test_changed_should_count_a_requested_worker_that_joined(self, members):
        provisioner = Provisioner()
        grown = growth(provisioner, members, max_workers=2)
        try:
            assert grown.grow()
            (request,) = await provisioner.requested(1)
            grown.changed()
            assert grown.joined == 0
            members.add(request.uid)
            grown.changed()
            grown.changed()  # counted once
            assert grown.joined == 1 and grown.grown == 1
            assert request.uid not in grown.plan.outstanding
            assert grown.grow()  # one member, no request outstanding: room for one more
            assert not grown.grow()
        finally:
            await grown.aclose()

    async def test_a_failing_provisioner_should_be_counted_logged_once_and_backed_off(self, members, caplog):
        """Test that a provisioner that raises is counted, logged once per back-off with secrets redacted, and
        not asked again during the back-off."""
        provisioner = Provisioner(RuntimeError("quota exceeded for postgresql://u:hunter2@db/x"), hold=True)
        grown = growth(provisioner, members, max_workers=5)
        try:
            with caplog.at_level(logging.WARNING, logger="leakypool.pool"):
                assert grown.grow() and grown.grow()
                await provisioner.requested(2)
                provisioner.release.set()
                async with asyncio.timeout(WAIT_S):
                    while grown.failures < 2:
                        await asyncio.sleep(0)  # the request tasks end within a turn or two
            assert grown.failures == 2
            warnings = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
            assert len(warnings) == 1 and "quota exceeded" in warnings[0]
            assert "hunter2" not in warnings[0]
            assert not grown.grow()  # backing off
            assert grown.plan.outstanding == {}
        finally:
            await grown.aclose()

    async def test_a_request_that_never_joins_should_stop_counting_after_the_timeout(self, members, caplog):
        provisioner = Provisioner()
        grown = growth(provisioner, members, max_workers=1, timeout=0.01)
        try:
            assert grown.grow()
            assert not grown.grow() or grown.timeouts == 1  # (a slow machine may already be past the timeout)
            await asyncio.sleep(0.05)  # past the provision timeout (sleep lasts at least this long)
            with caplog.at_level(logging.WARNING, logger="leakypool.pool"):
                assert grown.grow()
            assert grown.timeouts >= 1
            assert any("has not joined" in r.getMessage() for r in caplog.records)
        finally:
            await grown.aclose()

    async def test_aclose_should_cancel_requests_in_flight_and_refuse_to_grow(self, members):
        provisioner = Provisioner(hold=True)
        grown = growth(provisioner, members)
        assert grown.grow()
        await provisioner.requested(1)
        await grown.aclose()
        assert provisioner.closed == 1
        assert not grown.grow()
        assert grown.failures == 0  # cancelled, not failed

    async def test_the_default_should_grow_the_local_fleet_and_track_no_request(self, members):
        """Test that with no provisioner the fleet grows itself (closed here: it does not), and nothing is tracked."""
        grown = growth(None, members)
        try:
            assert isinstance(grown.provisioner, SubprocessProvisioner)
            assert grown.maximum == 0  # the fleet's own
            assert not grown.grow()
            assert grown.requested == 0 and grown.plan.outstanding == {}
        finally:
            await grown.aclose()
