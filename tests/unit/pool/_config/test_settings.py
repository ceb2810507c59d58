"""Tests for pool._config._settings: flags, LEAKYPOOL_* variables, validation, round trips."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._config._settings import POOL_SETTINGS, WORKER_SETTINGS, PoolConfig, WorkerConfig


class TestWorkerConfig:
    def test_from_env_should_prefer_explicit_over_environment_over_default(self):
        """Test the precedence: argument > variable > default."""
        env = {"LEAKYPOOL_PORT": "7000", "LEAKYPOOL_MAX_CONCURRENT_TASKS": "4"}
        config = WorkerConfig.from_env(env, port=8000)
        assert config.port == 8000
        assert config.max_concurrent_tasks == 4
        assert config.host == "127.0.0.1"

    @pytest.mark.parametrize(
        ("variable", "value", "expected"),
        [
            ("LEAKYPOOL_PORT", "seventy", "an integer in 0..65535"),
            ("LEAKYPOOL_PORT", "70000", "an integer in 0..65535"),
            ("LEAKYPOOL_MAX_CONCURRENT_TASKS", "-1", "an integer >= 0"),
            ("LEAKYPOOL_IDLE_TIMEOUT", "soon", "seconds >= 0"),
            ("LEAKYPOOL_IDLE_TIMEOUT", "nan", "seconds >= 0"),
            ("LEAKYPOOL_INSECURE", "maybe", "a boolean (1/0, true/false)"),
            ("LEAKYPOOL_DISCOVERY", "dns", "one of none, lan, local"),
            ("LEAKYPOOL_TLS_CERT", "/no/such/file", "a readable file"),
            ("LEAKYPOOL_INTERFACES", "eth0", "comma-separated IPv4 addresses"),
            ("LEAKYPOOL_UID", "not-a-uuid", "a UUID"),
        ],
    )
    def test_from_env_should_name_the_variable_expectation_and_value_when_invalid(self, variable, value, expected):
        """Test that a bad variable fails at construction with a message that says what to fix."""
        with pytest.raises(pool.ConfigError) as info:
            WorkerConfig.from_env({variable: value})
        assert str(info.value) == f"{variable}: expected {expected}, got {value!r}"

    def test_from_argv_should_name_the_flag_when_invalid(self):
        """Test that flag errors name the flag, not the variable."""
        with pytest.raises(pool.ConfigError, match=r"^--port: expected an integer in 0..65535, got 'x'$"):
            WorkerConfig.from_argv(["--port", "x"], {})

    def test_from_argv_should_beat_the_environment(self):
        """Test that a flag wins over its variable."""
        config = WorkerConfig.from_argv(["--max-concurrent-tasks", "3"], {"LEAKYPOOL_MAX_CONCURRENT_TASKS": "9"})
        assert config.max_concurrent_tasks == 3

    def test_from_argv_should_collect_repeated_tags(self):
        """Test that --tags repeats and also splits commas."""
        config = WorkerConfig.from_argv(["--tags", "gpu", "--tags", "eu,big"], {})
        assert config.tags == ("gpu", "eu", "big")

    def test_validated_should_refuse_a_certificate_without_its_key(self, tmp_path):
        """Test that half a TLS setup is an error, not a silent downgrade."""
        cert = tmp_path / "cert.pem"
        cert.write_text("x")
        with pytest.raises(pool.ConfigError, match="--tls-cert and --tls-key"):
            WorkerConfig.from_env({"LEAKYPOOL_TLS_CERT": str(cert)})

    @given(
        st.builds(
            WorkerConfig,
            host=st.sampled_from(["127.0.0.1", "0.0.0.0", "::1"]),
            port=st.integers(0, 65535),
            tags=st.lists(st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True), max_size=3).map(tuple),
            max_concurrent_tasks=st.integers(0, 10_000),
            idle_timeout=st.floats(0, 1e6),
            max_lifetime=st.floats(0, 1e6),
            insecure=st.booleans(),
            discovery=st.sampled_from(["none", "lan", "local"]),
            log_level=st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR"]),
        )
    )
    def test_from_env_should_invert_to_env(self, config):
        """Test the round trip a pool relies on to configure the workers it spawns."""
        assert WorkerConfig.from_env(config.to_env()) == config

    def test_every_setting_should_be_a_field(self):
        """Test that the settings table and the dataclass agree."""
        fields = {f.name for f in dataclasses.fields(WorkerConfig)}
        assert {s.name for s in WORKER_SETTINGS} <= fields


class TestPoolConfig:
    @given(
        st.builds(
            PoolConfig,
            spawn=st.none() | st.integers(0, 64),
            startup_timeout=st.floats(0.001, 1e5),
            shutdown_grace=st.floats(0, 1e5),
        )
    )
    def test_from_env_should_invert_to_env(self, config):
        """Test that a pool's settings survive the environment round trip."""
        assert PoolConfig.from_env(config.to_env()) == config

    def test_from_env_should_ignore_the_environment_when_none(self):
        """Test the use_env=False opt-out."""
        assert PoolConfig.from_env(None).spawn is None

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"spawn": -1}, "spawn: expected an integer >= 0, got '-1'"),
            ({"spawn": 1.5}, "spawn: expected an integer >= 0, got '1.5'"),
            ({"spawn": True}, "spawn: expected an integer >= 0, got True"),
            ({"startup_timeout": 0}, "startup_timeout: expected seconds > 0, got '0'"),
        ],
    )
    def test_from_env_should_validate_explicit_arguments(self, kwargs, message):
        """Test that code-given values follow the same rules as variables."""
        with pytest.raises(pool.ConfigError) as info:
            PoolConfig.from_env({}, **kwargs)
        assert str(info.value) == message

    def test_settings_should_all_be_fields(self):
        """Test that the settings table and the dataclass agree."""
        assert {s.name for s in POOL_SETTINGS} == {f.name for f in dataclasses.fields(PoolConfig)}


class TestMetricsHost:
    @pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.org"])
    def test_an_observation_port_off_loopback_should_need_a_token(self, host):
        """Test that the page, /status and /metrics are never served off loopback without a token."""
        with pytest.raises(pool.ConfigError) as info:
            PoolConfig.from_env({"LEAKYPOOL_METRICS_HOST": host})
        assert (
            str(info.value) == f"metrics_host: expected a loopback address unless a metrics token is set, got {host!r}"
        )
        with pytest.raises(pool.ConfigError, match="--metrics-host"):
            WorkerConfig.from_env({"LEAKYPOOL_METRICS_HOST": host})

    @pytest.mark.parametrize("host", ["127.0.0.1", "::1", "[::1]", "localhost", "127.8.9.10"])
    def test_loopback_should_need_no_token(self, host):
        """Test the default stance: loopback serves without a token."""
        assert PoolConfig.from_env({"LEAKYPOOL_METRICS_HOST": host}).metrics_host == host
        assert WorkerConfig.from_env({"LEAKYPOOL_METRICS_HOST": host}).metrics_token == ""

    def test_a_token_should_allow_any_host(self):
        """Test that a token opens other addresses, for both sides."""
        env = {"LEAKYPOOL_METRICS_HOST": "0.0.0.0", "LEAKYPOOL_METRICS_TOKEN": "t0k"}
        assert PoolConfig.from_env(env).metrics_token == "t0k"
        assert WorkerConfig.from_env(env).metrics_host == "0.0.0.0"


def test_pool_settings_should_each_be_a_worker_pool_argument():
    """Test that every pool setting can be given in code, not only as a LEAKYPOOL_* variable (use_env=False)."""
    import inspect

    import pool

    arguments = set(inspect.signature(pool.WorkerPool).parameters)
    assert {setting.name for setting in POOL_SETTINGS} - arguments == set()


def test_a_refused_url_should_never_echo_its_password():
    """Test that a mistyped store URL (argument or variable) is named in the error without its password."""
    import pool

    for make in (
        lambda: pool.WorkerPool(store="postgresq://app:s3cret@db/app", use_env=False),
        lambda: PoolConfig.from_env({"LEAKYPOOL_STORE": "postgresq://app:s3cret@db/app"}),
    ):
        with pytest.raises(pool.ConfigError, match=r"postgresq://app:\*\*\*@db/app") as info:
            make()
        assert "s3cret" not in str(info.value)


class TestSecretSettings:
    def test_the_secret_should_be_read_from_the_environment_only_and_kept_out_of_reprs(self):
        """Test that LEAKYPOOL_SECRET has no flag (every user can read a command line) and never shows in a repr."""
        from pool._config._settings import worker_parser

        config = WorkerConfig.from_argv(["--port", "1"], {"LEAKYPOOL_SECRET": "hush"})
        assert config.secret == "hush" and "hush" not in repr(config)
        assert "hush" not in repr(PoolConfig.from_env({"LEAKYPOOL_SECRET": "hush"}))
        assert "--secret" not in worker_parser().format_help().replace("--secret-file", "")

    def test_no_secret_should_be_refused(self):
        """Test that ``--no-secret`` is an error now (issue 43: every connection proves the secret)."""
        with pytest.raises(pool.ConfigError, match="--no-secret: removed"):
            WorkerConfig.from_argv(["--no-secret"], {})

    def test_default_secret_file_should_follow_an_owned_xdg_config_home_and_refuse_a_foreign_one(self, tmp_path):
        """Test that the default secret is in the user's config directory, never in one another user owns."""
        import os

        from pool._config._places import default_secret_file

        assert default_secret_file({"XDG_CONFIG_HOME": str(tmp_path)}) == str(tmp_path / "leakypool" / "secret")
        if os.getuid() != 0:
            assert not default_secret_file({"XDG_CONFIG_HOME": "/"}).startswith("/leakypool")
        assert default_secret_file({"XDG_CONFIG_HOME": "relative"}).endswith(
            os.path.join(".config", "leakypool", "secret")
        )


class TestSecretFile:
    def test_a_default_secret_file_others_can_read_should_be_refused(self, tmp_path):
        from pool._transport._secret import load_or_create

        path = tmp_path / "secret"
        path.write_text("token\n")
        path.chmod(0o644)
        with pytest.raises(pool.ConfigError, match="readable by other users"):
            load_or_create(str(path))
        path.chmod(0o600)
        assert load_or_create(str(path)) == "token"

    def test_a_secret_file_in_a_directory_others_may_enter_should_be_refused(self, tmp_path):
        """Test that the default secret's directory must be private too (issue 43, as OpenSSH checks ~/.ssh)."""
        from pool._transport._secret import load_or_create

        directory = tmp_path / "leakypool"
        directory.mkdir(mode=0o700)
        (directory / "secret").write_text("token\n")
        (directory / "secret").chmod(0o600)
        directory.chmod(0o755)
        with pytest.raises(pool.ConfigError, match=f"chmod 700 {directory}"):
            load_or_create(str(directory / "secret"))

    def test_a_secret_source_should_hold_several_secrets_and_pick_up_a_rotation(self, tmp_path, monkeypatch):
        """Test that a file with two secrets yields both (old and new, during a rotation), re-read when it changes."""
        from pool._transport import _secret

        monkeypatch.setattr(_secret, "RELOAD_S", 0.0)
        path = tmp_path / "secret"
        path.write_text("old\n")
        path.chmod(0o600)
        source = _secret.SecretSource(path=str(path))
        assert source.secrets() == ("old",)
        path.write_text("old\nnew\n")
        assert source.secrets() == ("old", "new")
        path.write_text("new\n")
        assert source.secrets() == ("new",)
        assert _secret.SecretSource("a b").secrets() == ("a", "b")

    def test_a_pool_given_an_unreadable_secret_file_should_fail_at_construction(self, tmp_path):
        with pytest.raises(pool.ConfigError, match="secret_file"):
            pool.WorkerPool(spawn=0, secret_file=str(tmp_path / "missing"), use_env=False)


class TestIndirectUrls:
    """A URL with a password is given by reference, never on a command line (issue 43 item 6)."""

    def test_a_registry_should_be_read_from_a_file_or_a_variable(self, tmp_path, monkeypatch):
        url = "postgresql://app:hunter2@db/app"
        path = tmp_path / "registry"
        path.write_text(url + "\n")
        monkeypatch.setenv("REGISTRY_URL", url)
        assert WorkerConfig.from_argv(["--registry", f"@{path}"], {}).registry == url
        assert WorkerConfig.from_argv(["--registry", "env:REGISTRY_URL"], {}).registry == url
        assert PoolConfig.from_env({"LEAKYPOOL_STORE": f"@{path}"}).store == url

    def test_a_missing_file_or_variable_should_fail_in_one_line_without_the_url(self, tmp_path):
        with pytest.raises(pool.ConfigError, match="--registry: expected a registry URL"):
            WorkerConfig.from_argv(["--registry", f"@{tmp_path / 'missing'}"], {})
        with pytest.raises(pool.ConfigError, match="--registry"):
            WorkerConfig.from_argv(["--registry", "env:NOT_SET_ANYWHERE"], {})
