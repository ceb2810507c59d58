"""The I/O-free growth decision (`ProvisionPlan`), the request a provisioned worker gets, and the command line."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pool
from pool._config._settings import WorkerConfig
from pool._fleet import _provision
from pool._fleet._plan import BACKOFF_MAX_S, ProvisionPlan, backoff_s
from pool._fleet._provision import CommandProvisioner, WorkerRequest
from pool._fleet._provisioning import worker_request


class PlanMachine(RuleBasedStateMachine):
    """Random demand, joins, departures, failures and time: the bounds always hold."""

    def __init__(self) -> None:
        super().__init__()
        self.plan = ProvisionPlan(max_workers=5, provision_timeout=10.0, max_outstanding=3)
        self.now = 0.0
        self.members: set[uuid.UUID] = set()
        self.others = 0  # members nobody asked for (another pool's, spawned ones)
        self.asked = 0  # uids are numbered, not random: hypothesis replays a failing run step for step

    def count(self) -> int:
        return len(self.members) + self.others

    @rule()
    def starved(self) -> None:
        before = dict(self.plan.outstanding)
        wanted = self.plan.wanted(self.now, self.count())
        assert wanted in (0, 1)
        if self.now < self.plan.resume_at:
            assert wanted == 0  # no request during a back-off
        if wanted:
            assert self.count() + len(before) < self.plan.max_workers
            self.asked += 1
            self.plan.requested(uuid.UUID(int=self.asked), self.now)
        assert len(self.plan.outstanding) >= len(before)

    @precondition(lambda self: self.plan.outstanding)
    @rule(data=st.data())
    def joins(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.plan.outstanding)))
        assert self.plan.joined(uid)
        self.members.add(uid)
        assert self.plan.failures == 0

    @precondition(lambda self: self.plan.outstanding)
    @rule(data=st.data())
    def fails(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.plan.outstanding)))
        running = self.now < self.plan.resume_at
        assert self.plan.failed(uid, self.now) is (not running)  # logged once per back-off
        assert uid not in self.plan.outstanding

    @rule()
    def stranger_joins(self) -> None:
        if self.count() + len(self.plan.outstanding) < self.plan.max_workers:
            self.others += 1  # (one that would break the bound is the plan's input, not its doing)

    @precondition(lambda self: self.members)
    @rule()
    def one_leaves(self) -> None:
        self.members.pop()

    @rule(seconds=st.floats(0.0, 15.0))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        for uid in self.plan.expired(self.now):
            assert uid not in self.plan.outstanding
        assert all(deadline > self.now for deadline in self.plan.outstanding.values())

    @invariant()
    def bounded(self) -> None:
        assert len(self.plan.outstanding) <= self.plan.max_outstanding
        assert self.count() + len(self.plan.outstanding) <= self.plan.max_workers


PlanMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
test_plan_should_stay_within_its_bounds = PlanMachine.TestCase


def test_plan_should_ask_up_to_max_workers_counting_outstanding_requests():
    plan = ProvisionPlan(max_workers=3, provision_timeout=5.0, max_outstanding=10)
    asked = 0
    while plan.wanted(0.0, members=1):
        plan.requested(uuid.uuid4(), 0.0)
        asked += 1
    assert asked == 2


def test_plan_should_stop_counting_a_request_after_the_provision_timeout():
    plan = ProvisionPlan(max_workers=1, provision_timeout=5.0)
    uid = uuid.uuid4()
    plan.requested(uid, 0.0)
    assert not plan.wanted(1.0, 0)
    assert plan.expired(4.9) == []
    assert plan.expired(5.0) == [uid]
    assert plan.wanted(5.0, 0) == 1


def test_plan_should_back_off_after_a_failure_and_log_once_per_back_off():
    plan = ProvisionPlan(max_workers=10, provision_timeout=60.0)
    a, b = uuid.uuid4(), uuid.uuid4()
    plan.requested(a, 0.0)
    plan.requested(b, 0.0)
    assert plan.failed(a, 0.0) is True
    assert plan.failed(b, 0.1) is False  # same back-off: counted, not logged again
    assert plan.wanted(0.5, 0) == 0
    assert plan.wanted(backoff_s(1), 0) == 1


@given(st.integers(1, 100))
def test_backoff_should_grow_and_stay_bounded(failures):
    assert 0 < backoff_s(failures) <= BACKOFF_MAX_S
    assert backoff_s(failures) <= backoff_s(failures + 1)


def test_worker_request_should_carry_the_settings_as_variables_and_as_flags():
    uid = uuid.uuid4()
    spawned = {
        "LEAKYPOOL_MAX_CONCURRENT_TASKS": "4",
        "LEAKYPOOL_HOST": "127.0.0.1",
        "LEAKYPOOL_HOLD_SLOT_WHILE_WAITING": "1",
    }
    request = worker_request(uid, 3, spawned, registry="postgresql://u:p@db/x", tags=("gpu",), idle_timeout=2.0)
    assert "LEAKYPOOL_HOST" not in request.env  # where the worker binds is the provisioner's business
    from_env = WorkerConfig.from_env(request.env)
    from_args = WorkerConfig.from_argv(list(request.args), environ={"LEAKYPOOL_REGISTRY": "postgresql://u:p@db/x"})
    assert from_env == from_args
    assert from_args.uid == str(uid) and from_args.max_concurrent_tasks == 4 and from_args.idle_timeout == 2.0
    assert from_args.registry == "postgresql://u:p@db/x" and from_args.tags == ("gpu",)
    assert not any("u:p@" in arg for arg in request.args)  # a password: in env only (a command line is world-readable)
    assert from_args.hold_slot_while_waiting
    assert request.seq == 3


def test_command_provisioner_should_fill_in_its_placeholders():
    request = WorkerRequest(uuid.UUID(int=7), {}, ("--uid", "x y"), seq=2)
    prov = CommandProvisioner(["ssh", "host{seq}", "leakypool-worker {worker_args}", "{worker_args}", "--tags={uid}"])
    assert prov.command(request) == [
        "ssh",
        "host2",
        "leakypool-worker --uid 'x y'",
        "--uid",
        "x y",
        f"--tags={uuid.UUID(int=7)}",
    ]


@pytest.mark.parametrize("argv", [[], "leakypool-worker"])
def test_command_provisioner_should_refuse_a_bad_command(argv):
    with pytest.raises(pool.ConfigError, match="CommandProvisioner"):
        CommandProvisioner(argv)


def test_provision_error_should_survive_pickling():
    error = pickle.loads(pickle.dumps(pool.ProvisionError("command exited with status 1")))
    assert type(error) is pool.ProvisionError and str(error) == "command exited with status 1"


@pytest.mark.parametrize("bad", [0, -1.0, True, "60"])
def test_a_pool_should_refuse_a_bad_provision_timeout(bad):
    with pytest.raises(pool.ConfigError, match="provision_timeout"):
        pool.WorkerPool(provisioner=CommandProvisioner(["true"]), max_workers=1, provision_timeout=bad, use_env=False)


def test_a_request_that_returned_but_never_joined_should_not_reset_the_back_off():
    plan = ProvisionPlan(max_workers=10, provision_timeout=5.0)
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    plan.requested(a, 0.0)
    plan.failed(a, 0.0)
    plan.requested(b, backoff_s(1))  # the provisioner returns for b, whose worker never comes
    assert plan.expired(backoff_s(1) + 5.0) == [b]
    assert plan.failures == 1  # the next failure backs off longer
    plan.requested(c, 10.0)
    assert plan.joined(c) and plan.failures == 0  # a worker that joins is what resets it


def test_worker_request_should_carry_the_worker_tls_files_as_variables_and_as_flags(tmp_path):
    files = []
    for name in ("worker.pem", "worker-key.pem", "ca.pem"):
        (tmp_path / name).write_text("-")
        files.append(str(tmp_path / name))
    request = worker_request(uuid.uuid4(), 0, {}, registry="sqlite:///r.db", tags=(), idle_timeout=2.0, tls=files)
    assert [request.env[f"LEAKYPOOL_{k}"] for k in ("TLS_CERT", "TLS_KEY", "TLS_CLIENT_CA")] == files
    from_args = WorkerConfig.from_argv(list(request.args), environ={})
    assert from_args == WorkerConfig.from_env(request.env)
    assert (from_args.tls_cert, from_args.tls_key, from_args.tls_client_ca) == tuple(files)


@pytest.mark.parametrize("tls", [("cert.pem", "key.pem"), ("cert.pem", "", "ca.pem"), "cert.pem"])
def test_command_provisioner_should_refuse_incomplete_tls_files(tls):
    with pytest.raises(pool.ConfigError, match="CommandProvisioner tls"):
        CommandProvisioner(["true"], tls=tls)


def test_a_pool_should_refuse_a_provisioner_whose_workers_could_never_join():
    with pytest.raises(pool.ConfigError, match=r"give discovery=pool.StoreDiscovery\(URL\)") as info:
        secret = CommandProvisioner(["true", "postgresql://u:hunter2@db/x"])
        pool.WorkerPool(provisioner=secret, max_workers=1, use_env=False)
    assert len(str(info.value).splitlines()) == 1 and "hunter2" not in str(info.value)
    pool.WorkerPool(provisioner=pool.SubprocessProvisioner(), max_workers=1, use_env=False)  # joins by itself


async def test_a_provision_cancelled_before_its_command_is_watched_should_kill_and_reap_the_command(monkeypatch):
    """Test that a command whose request is cancelled while its stderr is being attached is not left running."""
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def attach_that_hangs(process: subprocess.Popen[bytes]) -> None:
        started.set_result(process.pid)
        await asyncio.Event().wait()  # cancelled here

    monkeypatch.setattr(_provision._Tail, "attach", staticmethod(attach_that_hangs))
    provisioner = CommandProvisioner(["sleep", "60"])
    request = asyncio.ensure_future(provisioner.provision(WorkerRequest(uuid.uuid4(), {}, (), seq=1)))
    pid = await asyncio.wait_for(started, 10)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    async with asyncio.timeout(10):  # killed, then reaped by a thread: the pid disappears (no event carries it)
        while os.path.exists(f"/proc/{pid}"):
            await asyncio.sleep(0.01)
    assert provisioner.pids == []
    await provisioner.aclose()


def test_worker_request_should_carry_the_secret_in_its_environment_only():
    """Test that the pool's secret reaches a provisioned worker as LEAKYPOOL_SECRET, never as a flag (ps shows flags)."""
    request = worker_request(uuid.uuid4(), 0, {}, registry="sqlite:///r.db", tags=(), idle_timeout=2.0, secret="hush")
    assert request.env["LEAKYPOOL_SECRET"] == "hush"
    assert not any("hush" in arg for arg in request.args)
