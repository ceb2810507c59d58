"""Tests for pool._call._dispatcher: which dispatcher a routine call made here goes to."""

from __future__ import annotations

import asyncio

import pytest

import pool
from pool._call._dispatcher import (
    closed,
    current_dispatcher,
    dispatching_to,
    opened,
    reset_dispatcher,
    set_dispatcher,
)


class Named:
    """A dispatcher stand-in: only its identity matters here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


class TestCurrentDispatcher:
    def test_current_dispatcher_should_raise_pool_closed_naming_the_routine_when_there_is_none(self):
        """Test the error outside any pool and outside any loop."""
        with pytest.raises(pool.PoolClosed, match=r"^fetch\(\) was called with no active WorkerPool"):
            current_dispatcher("fetch")

    async def test_current_dispatcher_should_raise_pool_closed_when_no_pool_is_open_on_this_loop(self):
        """Test the error inside a loop that has no open pool."""
        with pytest.raises(pool.PoolClosed, match=r"async with pool\.WorkerPool"):
            current_dispatcher("fetch")

    def test_current_dispatcher_should_be_the_innermost_when_blocks_nest(self):
        """Test nesting, and that leaving a block restores the outer dispatcher, then none."""
        outer, inner = Named("outer"), Named("inner")
        with dispatching_to(outer):
            with dispatching_to(inner):
                assert current_dispatcher("f") is inner
            assert current_dispatcher("f") is outer
        with pytest.raises(pool.PoolClosed):
            current_dispatcher("f")

    def test_dispatching_to_should_restore_the_outer_dispatcher_when_the_block_raises(self):
        """Test that an exception inside the block does not leave its dispatcher current."""
        outer = Named("outer")
        with dispatching_to(outer):
            with pytest.raises(KeyError), dispatching_to(Named("inner")):
                raise KeyError("x")
            assert current_dispatcher("f") is outer

    async def test_current_dispatcher_should_be_inherited_by_tasks_started_in_the_block(self):
        """Test that a task started inside the block dispatches there, even after the block ended."""
        mine = Named("mine")
        with dispatching_to(mine):
            child = asyncio.get_running_loop().create_task(self.which())
        assert await asyncio.wait_for(child, 5) is mine

    async def which(self):
        await asyncio.sleep(0)
        return current_dispatcher("f")

    def test_set_dispatcher_should_be_undone_by_reset_dispatcher(self):
        """Test the token pair a worker's upstream uses."""
        upstream = Named("upstream")
        token = set_dispatcher(upstream)
        try:
            assert current_dispatcher("f") is upstream
        finally:
            reset_dispatcher(token)
        with pytest.raises(pool.PoolClosed):
            current_dispatcher("f")


class TestOpenedOnTheLoop:
    async def test_current_dispatcher_should_fall_back_to_the_pool_last_opened_on_this_loop(self):
        """Test the fallback for a task that did not inherit an ``async with`` (a web framework's handler)."""
        first, second = Named("first"), Named("second")
        opened(first)
        opened(second)
        try:
            assert current_dispatcher("f") is second
            closed(second)
            assert current_dispatcher("f") is first
        finally:
            closed(second)
            closed(first)
        with pytest.raises(pool.PoolClosed):
            current_dispatcher("f")

    async def test_current_dispatcher_should_prefer_the_context_to_the_pools_open_on_the_loop(self):
        """Test that the ``async with`` around the call wins over the loop's most recent pool."""
        opened_one, mine = Named("opened"), Named("mine")
        opened(opened_one)
        try:
            with dispatching_to(mine):
                assert current_dispatcher("f") is mine
        finally:
            closed(opened_one)

    async def test_closed_should_remove_any_one_pool_not_only_the_last(self):
        """Test that pools may close in any order, and closing one not open is harmless."""
        a, b, c = Named("a"), Named("b"), Named("c")
        for d in (a, b, c):
            opened(d)
        try:
            closed(b)
            closed(Named("never opened"))
            assert current_dispatcher("f") is c
            closed(c)
            assert current_dispatcher("f") is a
        finally:
            for d in (a, b, c):
                closed(d)

    def test_pools_open_on_one_loop_should_not_be_seen_from_another(self):
        """Test that the fallback is per event loop: a pool opened on one loop is not current on another."""
        here = Named("here")

        async def open_it():
            opened(here)

        async def look():
            return current_dispatcher("f")

        async def close_it():
            closed(here)

        first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
        try:
            first.run_until_complete(open_it())
            assert first.run_until_complete(look()) is here
            with pytest.raises(pool.PoolClosed):
                second.run_until_complete(look())
            first.run_until_complete(close_it())
            with pytest.raises(pool.PoolClosed):
                first.run_until_complete(look())
        finally:
            first.close()
            second.close()
