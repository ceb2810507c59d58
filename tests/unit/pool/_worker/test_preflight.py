"""Tests for what a worker settles before it serves: its hook, its advertised capacity, the refusals.

The same refusals as an operator meets them (one line, status 2) are in
tests/integration/fleet/test_worker_main.py; here each decision is checked on its own.
"""

from __future__ import annotations

import base64

import pytest

from backpressure import AllOf, AnyOf, TaskCountBackpressure
from pool._config._settings import ConfigError, WorkerConfig
from pool._transport import _wire
from pool._worker._preflight import check_registry, check_security, count_cap, load_backpressure, runs_inline


def shipped(value: object) -> str:
    """``value`` as a pool ships a hook to its workers (base64 of the wire pickle)."""
    return base64.b64encode(_wire.dumps(value, what="a hook")).decode()


class TestLoadBackpressure:
    def test_load_backpressure_should_return_the_shipped_hook_when_a_pool_sent_one(self):
        """Test that a shipped hook wins over --max-concurrent-tasks."""
        hook = load_backpressure(WorkerConfig(max_concurrent_tasks=9, backpressure=shipped(TaskCountBackpressure(3))))
        assert isinstance(hook, TaskCountBackpressure)
        assert hook.threshold == 3

    def test_load_backpressure_should_count_tasks_when_nothing_was_shipped(self):
        hook = load_backpressure(WorkerConfig(max_concurrent_tasks=4))
        assert isinstance(hook, TaskCountBackpressure)
        assert hook.threshold == 4

    def test_load_backpressure_should_return_none_when_tasks_are_unlimited(self):
        assert load_backpressure(WorkerConfig(max_concurrent_tasks=0)) is None

    @pytest.mark.parametrize(
        ("blob", "message"),
        [
            (shipped({"not": "callable"}), "expected a callable hook, got {'not': 'callable'}"),
            (base64.b64encode(b"not a pickle").decode(), "LEAKYPOOL_BACKPRESSURE: "),
        ],
        ids=["not-callable", "not-a-pickle"],
    )
    def test_load_backpressure_should_raise_config_error_when_the_hook_cannot_serve(self, blob, message):
        with pytest.raises(ConfigError) as raised:
            load_backpressure(WorkerConfig(backpressure=blob))
        assert str(raised.value).startswith("LEAKYPOOL_BACKPRESSURE: ")
        assert message in str(raised.value)


class TestCheckSecurity:
    @pytest.mark.parametrize(
        "config",
        [
            WorkerConfig(host="127.0.0.1"),
            WorkerConfig(host="0.0.0.0", insecure=True),
            WorkerConfig(host="10.1.2.3", tls_cert="c.pem", tls_key="k.pem", tls_client_ca="ca.pem"),
        ],
        ids=["loopback", "insecure", "mutual-tls"],
    )
    def test_check_security_should_pass_when_strangers_cannot_run_code(self, config):
        check_security(config)

    @pytest.mark.parametrize(
        ("config", "message"),
        [
            (WorkerConfig(host="10.1.2.3"), "a worker off loopback runs code for anyone who reaches it"),
            (
                WorkerConfig(host="10.1.2.3", tls_cert="c.pem", tls_key="k.pem"),
                "TLS without --tls-client-ca lets any client that can connect run code",
            ),
        ],
        ids=["plain", "tls-without-client-ca"],
    )
    def test_check_security_should_refuse_when_anyone_reaching_the_port_could_run_code(self, config, message):
        with pytest.raises(ConfigError) as raised:
            check_security(config)
        assert str(raised.value).startswith("--host 10.1.2.3: ")
        assert message in str(raised.value)


class TestCheckRegistry:
    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", ""])
    def test_check_registry_should_refuse_when_a_wildcard_bind_has_no_advertised_address(self, host):
        with pytest.raises(ConfigError, match="give --advertise ADDRESS"):
            check_registry(WorkerConfig(host=host, registry="sqlite:///r.db"))

    @pytest.mark.parametrize(
        "config",
        [
            WorkerConfig(host="0.0.0.0", registry="sqlite:///r.db", advertise="10.1.2.3"),
            WorkerConfig(host="10.1.2.3", registry="sqlite:///r.db"),
            WorkerConfig(host="0.0.0.0"),  # no record: nothing to dial
        ],
        ids=["advertised", "one-address", "no-registry"],
    )
    def test_check_registry_should_pass_when_the_record_names_a_dialable_address(self, config):
        check_registry(config)


class TestCountCap:
    @pytest.mark.parametrize(
        ("hook", "cap"),
        [
            (None, 0),
            (TaskCountBackpressure(5), 5),
            (AnyOf(TaskCountBackpressure(5), TaskCountBackpressure(2)), 2),
            (AnyOf(lambda context: False, TaskCountBackpressure(7)), 7),
            (AnyOf(lambda context: False), 0),
            (AllOf(TaskCountBackpressure(5), lambda context: False), 0),  # the count alone does not reject
            (lambda context: False, 0),
        ],
        ids=["none", "task-count", "any-of-lowest", "any-of-mixed", "any-of-uncounted", "all-of", "plain-hook"],
    )
    def test_count_cap_should_be_the_count_at_which_the_hook_rejects_everything(self, hook, cap):
        assert count_cap(hook) == cap


class TestRunsInline:
    @pytest.mark.parametrize(
        ("config", "inline"),
        [
            (WorkerConfig(unix_socket="/run/w.sock"), True),
            (WorkerConfig(port=5000), False),
            (WorkerConfig(unix_socket="/run/w.sock", metrics_port=0), False),
            (WorkerConfig(unix_socket="/run/w.sock", registry="sqlite:///r.db"), False),
        ],
        ids=["unix-only", "grpc", "metrics-port", "registry"],
    )
    def test_runs_inline_should_hold_only_when_the_watch_thread_can_answer_everything_served(self, config, inline):
        assert runs_inline(config) is inline
