"""Tests for pool._jobs._job: `Job` (a snapshot and its verbs) and `Jobs` (submit, look up, wait, pause), on a real
SQLite store, with a recording stand-in for the scheduler (`JobHolder`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import time
import types
from collections.abc import AsyncIterator

import pytest

import pool
from pool._call._task import CallRecord
from pool._jobs._attempt import raised
from pool._jobs._codec import RetryPolicy, decode, seal_outcome
from pool._jobs._job import Job, Jobs, queue_name
from pool._jobs._store import JobRecord
from pool._jobs._stores._sqlite import SQLiteStore
from pool._routine import CallOptions
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from tests.sealing import SEAL

UTC = datetime.UTC


class Holder:
    """The scheduler as the job book sees it (`JobHolder`): it records what it is told."""

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self.adopted: list[JobRecord | None] = []
        self.held: set[str] = set()
        self.due: list[float] = []
        self.cancelled: list[str] = []
        self.pause_changes = 0
        self.purged = 4

    def claim(self) -> str:
        return self.owner

    def adopt(self, job: JobRecord | None, run: object = None) -> None:
        self.adopted.append(job)

    def holds(self, job_id: str) -> bool:
        return job_id in self.held

    def due_at(self, when: float) -> None:
        self.due.append(when)

    def cancel_running(self, job_id: str) -> None:
        self.cancelled.append(job_id)

    def pauses_changed(self) -> None:
        self.pause_changes += 1


class Unpausable:
    """A store of an earlier release: no pauses."""

    url = "memory://"


@contextlib.asynccontextmanager
async def book(tmp_path, holder: Holder | None = None, **kwargs) -> AsyncIterator[Jobs]:
    """A job book on a fresh SQLite file (closed after)."""
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    await store.open()
    kwargs.setdefault("max_pending", None)
    kwargs.setdefault("default_deadline", 600.0)
    try:
        yield Jobs(store, holder or Holder(), SEAL, **kwargs)
    finally:
        await store.close()


def task(name: str = "app.add", **kwargs) -> CallRecord:
    fields = {"generator": False, "digest": b"d" * 16, "blob": b"routine", "args": _wire.pack_args(name, (1, 2), {})}
    return CallRecord(name, **(fields | kwargs))


def returned(value: object) -> bytes:
    return pb.Outcome(kind=pb.Outcome.RETURN, value=_wire.dumps(value, what="x")).SerializeToString()


async def run_and_finish(jobs: Jobs, job_id: str, state: str, outcome: bytes | None, error: str = "") -> None:
    """What another process does with a pending job: lease it, run it, record how it ended."""
    store = jobs.store
    await store.heartbeat("other", time.time(), 60)
    assert [r.id for r in await store.lease("other", 10, time.time() + 1)] == [job_id]
    assert await store.mark_running(job_id, "other", time.time())
    sealed = None if outcome is None else seal_outcome(job_id, outcome, SEAL)  # it holds the same secret
    assert await store.finish(job_id, "other", state, time.time(), outcome=sealed, error=error)


class TestQueueName:
    def test_queue_name_should_take_a_name_or_a_queue(self):
        """Test both spellings of a queue."""
        assert queue_name("mail") == "mail"
        assert queue_name(pool.Queue("mail", concurrency=2)) == "mail"

    @pytest.mark.parametrize("queue", ["", "   ", None, 3])
    def test_queue_name_should_raise_config_error_when_not_a_name(self, queue):
        """Test that an empty or non-string queue is refused with what was given."""
        with pytest.raises(pool.ConfigError, match="expected a queue name"):
            queue_name(queue)


class TestNewJob:
    async def test_new_job_should_generate_distinct_ids_unless_one_is_given(self, tmp_path):
        """Test generated ids (unique per book: a prefix, then a counter), the job_id option, and an override."""
        async with book(tmp_path) as jobs, book(tmp_path / "..", Holder()) as others:
            made = {jobs.new_job(task(), CallOptions(), 0.0).id for _ in range(100)}
            made.add(others.new_job(task(), CallOptions(), 0.0).id)
            assert len(made) == 101
            assert jobs.new_job(task(), CallOptions(job_id="nightly"), 0.0).id == "nightly"
            assert jobs.new_job(task(), CallOptions(job_id="nightly"), 0.0, job_id="slot-1").id == "slot-1"

    async def test_new_job_should_be_due_at_once_after_a_delay_or_at_run_at(self, tmp_path):
        """Test when a job comes due, and that its dispatch deadline counts from then."""
        async with book(tmp_path, default_deadline=600.0) as jobs:
            now = 1_000_000.0
            at_once = jobs.new_job(task(), CallOptions(), now)
            assert (at_once.next_at, at_once.deadline) == (now, now + 600.0)
            delayed = jobs.new_job(task(), CallOptions(delay=30.0, dispatch_deadline=5.0), now)
            assert (delayed.next_at, delayed.deadline) == (now + 30.0, now + 35.0)
            when = datetime.datetime.fromtimestamp(now + 3600, UTC)
            assert jobs.new_job(task(), CallOptions(run_at=when), now).next_at == now + 3600
            past = datetime.datetime.fromtimestamp(now - 3600, UTC)  # a run_at in the past: due, deadline from now
            assert jobs.new_job(task(), CallOptions(run_at=past), now).deadline == now + 600.0
            assert jobs.new_job(task(), CallOptions(), now, due=now + 7).next_at == now + 7

    async def test_new_job_should_carry_the_tasks_limits_and_the_options_retries(self, tmp_path):
        """Test the row's fields, and that its payload decodes to the task and retry policy."""
        async with book(tmp_path) as jobs:
            sent = task(queue="db", concurrency=2, total=5, key="tenant", workflow="wf", rate=(10, 60.0))
            options = CallOptions(retries=2, retry_backoff=0.5, retry_on=(KeyError,), priority=3)
            new = jobs.new_job(sent, options, 0.0)
            assert (new.routine, new.max_attempts, new.priority) == ("app.add", 3, 3)
            assert (new.queue, new.key, new.workflow, new.concurrency, new.total) == ("db", "tenant", "wf", 2, 5)
            assert (new.rate, new.rate_per) == (10, 60.0)
            got, policy = decode(new.id, new.payload, SEAL)
            assert (got.name, got.args, got.queue) == ("app.add", sent.args, "db")
            assert policy == RetryPolicy(0.5, (KeyError,))
            assert (
                jobs.new_job(task(), CallOptions(), 0.0).rate,
                jobs.new_job(task(), CallOptions(), 0.0).rate_per,
            ) == (
                0,
                0.0,
            )


class TestSubmit:
    async def test_submit_should_keep_a_plain_job_due_now_in_this_process(self, tmp_path):
        """Test that a job without limits, due now, is inserted already leased by this process's scheduler."""
        holder = Holder(owner="me")
        async with book(tmp_path, holder) as jobs:
            job = await jobs.submit(task(), CallOptions())
            record = await jobs.store.get(job.id)
            assert (record.state, record.owner) == ("pending", "me")
            assert holder.adopted == [record] and holder.due == []

    @pytest.mark.parametrize(
        ("sent", "options"),
        [
            (task(queue="db", concurrency=1), CallOptions()),
            (task(workflow="wf"), CallOptions()),
            (task(), CallOptions(delay=60.0)),
        ],
    )
    async def test_submit_should_leave_a_job_with_limits_or_a_delay_to_the_store(self, tmp_path, sent, options):
        """Test that a job the store must check (limits) or hold (a delay) is not kept, and its due time is passed on."""
        holder = Holder(owner="me")
        async with book(tmp_path, holder) as jobs:
            before = time.time()
            job = await jobs.submit(sent, options)
            record = await jobs.store.get(job.id)
            assert record.owner == "" and holder.adopted == []
            (due,) = holder.due
            assert due == record.next_at >= before

    async def test_submit_should_leave_the_job_to_the_store_when_the_scheduler_has_no_room(self, tmp_path):
        """Test that a declined claim puts the job in the store unowned, due now."""
        holder = Holder(owner="")
        async with book(tmp_path, holder) as jobs:
            job = await jobs.submit(task(), CallOptions())
            assert (await jobs.store.get(job.id)).owner == ""
            assert len(holder.due) == 1 and holder.adopted == []

    async def test_submit_should_return_the_active_job_with_the_same_id(self, tmp_path):
        """Test idempotency: a second submit of an active job_id attaches to it, and is not adopted twice."""
        holder = Holder(owner="me")
        async with book(tmp_path, holder) as jobs:
            first = await jobs.submit(task(), CallOptions(job_id="once"))
            again = await jobs.submit(task(), CallOptions(job_id="once"))
            assert again.id == first.id == "once"
            assert holder.adopted[0] is not None and holder.adopted[1:] == [None]
            assert (await jobs.counts())["pending"] == 1

    async def test_submit_should_not_pass_the_due_time_on_again_when_the_job_exists(self, tmp_path):
        """Test that attaching to an active job left to the store does not schedule a second lease for it."""
        holder = Holder(owner="")
        async with book(tmp_path, holder) as jobs:
            await jobs.submit(task(queue="db", concurrency=1), CallOptions(job_id="once"))
            await jobs.submit(task(queue="db", concurrency=1), CallOptions(job_id="once"))
            assert len(holder.due) == 1

    async def test_submit_should_tell_the_scheduler_nothing_was_kept_when_the_store_refuses(self, tmp_path):
        """Test that a submit over max_pending raises, and the claimed slot is handed back (adopt(None))."""
        holder = Holder(owner="me")
        async with book(tmp_path, holder, max_pending=1) as jobs:
            await jobs.submit(task(), CallOptions())
            with pytest.raises(pool.AdmissionRejected):
                await jobs.submit(task(), CallOptions())
            assert holder.adopted[-1] is None

    async def test_submit_should_refuse_a_connection_on_a_store_that_cannot_join_it(self, tmp_path):
        """Test that a submit in the caller's transaction needs PostgreSQL."""
        async with book(tmp_path) as jobs:
            defaults = CallOptions()
            options = types.SimpleNamespace(**{f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)})
            options.connection = object()  # (CallOptions itself checks it is an asyncpg connection)
            with pytest.raises(pool.ConfigError, match="needs a PostgreSQL store"):
                await jobs.submit(task(), options)


class TestLookUp:
    async def test_get_list_and_counts_should_read_the_store(self, tmp_path):
        """Test get (and None for an unknown id), list by state, counts."""
        async with book(tmp_path) as jobs:
            a = await jobs.submit(task(), CallOptions(job_id="a"))
            await jobs.submit(task(), CallOptions(job_id="b"))
            await jobs.cancel("b")
            assert (await jobs.get("a")).id == a.id and await jobs.get("missing") is None
            assert [j.id for j in await jobs.list("pending")] == ["a"]
            assert sorted(j.id for j in await jobs.list()) == ["a", "b"]
            counts = await jobs.counts()
            assert (counts["pending"], counts["cancelled"]) == (1, 1)
            assert jobs.purged == 4

    async def test_list_should_raise_config_error_when_the_state_is_unknown(self, tmp_path):
        """Test that a misspelt state is refused, naming the states there are."""
        async with book(tmp_path) as jobs:
            with pytest.raises(pool.ConfigError, match="state: expected one of"):
                await jobs.list("done")


class TestJob:
    def record(self, **changes) -> JobRecord:
        record = JobRecord(
            "j1", "app.add", "pending", 0, 1, 100.0, None, None, 700.0, 130.0, "", "", b"", None, False, "", "", "", 2
        )
        return dataclasses.replace(record, **changes)

    def test_job_should_show_its_record_with_times_as_utc_datetimes(self):
        """Test a snapshot's fields, and times read as aware UTC datetimes (None while unset)."""
        job = Job(None, self.record())  # type: ignore[arg-type]
        assert (job.id, job.routine, job.state, job.attempts, job.error, job.priority) == (
            "j1",
            "app.add",
            "pending",
            0,
            "",
            2,
        )
        assert job.created_at == datetime.datetime.fromtimestamp(100.0, UTC)
        assert job.run_at == datetime.datetime.fromtimestamp(130.0, UTC) and job.run_at.tzinfo is UTC
        assert job.started_at is None and job.finished_at is None and not job.done
        assert repr(job) == "<Job j1 app.add() pending, 0 attempt(s)>"

    @pytest.mark.parametrize(
        ("state", "done"), [("running", False), ("succeeded", True), ("failed", True), ("cancelled", True)]
    )
    def test_done_should_be_true_only_in_a_final_state(self, state, done):
        """Test the final states."""
        assert Job(None, self.record(state=state)).done is done  # type: ignore[arg-type]

    async def test_result_should_return_the_value_when_the_job_succeeded(self, tmp_path):
        """Test a job another process ran and recorded: its value is read from the stored outcome."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            await run_and_finish(jobs, job.id, "succeeded", returned(3))
            assert await asyncio.wait_for(job.result(), 5) == 3
            assert job.state == "succeeded" and job.attempts == 1 and job.done

    async def test_result_should_raise_the_routines_error_when_the_job_failed(self, tmp_path):
        """Test that a failed job re-raises the routine's own exception type."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            error = raised(KeyError("k"), "app.add").SerializeToString()
            await run_and_finish(jobs, job.id, "failed", error, "KeyError: 'k'")
            with pytest.raises(KeyError):
                await asyncio.wait_for(job.result(), 5)
            assert job.error == "KeyError: 'k'"

    async def test_result_should_raise_cancelled_error_when_the_job_was_cancelled(self, tmp_path):
        """Test a cancelled job: its waiters see CancelledError naming the job."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            await job.cancel()
            assert job.state == "cancelled"
            with pytest.raises(asyncio.CancelledError, match=f"job {job.id} was cancelled"):
                await asyncio.wait_for(job.result(), 5)

    async def test_result_should_raise_timeout_error_when_the_job_is_not_final_in_time(self, tmp_path):
        """Test the timeout of a wait for a job nobody runs."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            with pytest.raises(TimeoutError):
                await job.result(timeout=0.05)

    async def test_refresh_should_reread_the_job_and_keep_the_snapshot_when_it_is_gone(self, tmp_path):
        """Test refresh after another process changed it; a purged job leaves the last snapshot."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            await jobs.store.cancel(job.id, time.time())
            assert job.state == "pending"
            assert (await job.refresh()).state == "cancelled"
            await jobs.store.purge(time.time() + 1, 10)
            assert (await job.refresh()).state == "cancelled"


class TestWait:
    async def test_wait_should_return_at_once_when_this_process_ends_the_job(self, tmp_path):
        """Test that a job this process holds is reported by `notify_finished`, without rereading the store."""
        holder = Holder(owner="me")
        async with book(tmp_path, holder) as jobs:
            job = await jobs.submit(task(), CallOptions())
            holder.held.add(job.id)
            waiting = asyncio.ensure_future(jobs.wait(job.id, 5))
            await asyncio.sleep(0)
            done = dataclasses.replace(await jobs.store.get(job.id), state="succeeded")  # not written to the store
            jobs.notify_finished(job.id, done)
            assert await asyncio.wait_for(waiting, 5) is done

    async def test_wait_should_poll_for_a_job_another_process_runs(self, tmp_path):
        """Test that a job held elsewhere is reread until final."""
        async with book(tmp_path) as jobs:
            job = await jobs.submit(task(), CallOptions())
            waiting = asyncio.ensure_future(jobs.wait(job.id, 5))
            await run_and_finish(jobs, job.id, "succeeded", returned(1))
            assert (await asyncio.wait_for(waiting, 5)).state == "succeeded"

    async def test_wait_should_raise_key_error_when_there_is_no_such_job(self, tmp_path):
        """Test an unknown id."""
        async with book(tmp_path) as jobs:
            with pytest.raises(KeyError, match="no job 'missing'"):
                await jobs.wait("missing", 5)


class TestCancel:
    async def test_cancel_should_tell_the_scheduler_only_when_the_job_may_be_held_here(self, tmp_path):
        """Test that cancelling a pending or running job asks the scheduler to drop it; a finished one does not."""
        holder = Holder()
        async with book(tmp_path, holder) as jobs:
            pending = await jobs.submit(task(), CallOptions(job_id="p"))
            assert (await jobs.cancel(pending.id)).state == "cancelled"
            assert holder.cancelled == ["p"]
            finished = await jobs.submit(task(), CallOptions(job_id="f"))
            await run_and_finish(jobs, finished.id, "succeeded", returned(1))
            assert (await jobs.cancel("f")).state == "succeeded"
            assert await jobs.cancel("missing") is None
            assert holder.cancelled == ["p"]


class TestPause:
    async def test_pause_and_resume_should_be_kept_in_the_store_and_tell_the_scheduler(self, tmp_path):
        """Test pause (a name or a Queue), paused, and resume, which also makes the queue's jobs due now."""
        holder = Holder()
        async with book(tmp_path, holder) as jobs:
            await jobs.pause("mail")
            await jobs.pause(pool.Queue("sms", concurrency=1))
            assert await jobs.paused() == ["mail", "sms"]
            assert holder.pause_changes == 2
            await jobs.resume("mail")
            assert await jobs.paused() == ["sms"]
            assert holder.pause_changes == 3 and holder.due == [0.0]

    async def test_pause_should_raise_config_error_when_the_store_cannot_pause(self):
        """Test a store without pauses."""
        jobs = Jobs(Unpausable(), Holder(), SEAL, max_pending=None, default_deadline=600.0)  # type: ignore[arg-type]
        with pytest.raises(pool.ConfigError, match="pausing queues needs a store that keeps them"):
            await jobs.pause("mail")
        with pytest.raises(pool.ConfigError):
            await jobs.paused()
