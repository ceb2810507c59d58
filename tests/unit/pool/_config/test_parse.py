"""Tests for pool._config._parse: a setting's flag, variable and conversion, resolve/to_env, and each parser.

Sizes and import paths are tested in tests/unit/pool/_worker/test_recycle.py; the settings tables
built on these parsers in tests/unit/pool/_config/test_settings.py.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._config._parse import (
    Setting,
    boolean,
    choice,
    dns_sd_type,
    indirect,
    integer,
    ipv4_list,
    is_loopback,
    path_or_empty,
    positive_seconds,
    resolve,
    seconds,
    size_bytes,
    store_url,
    tag_list,
    text,
    to_env,
    uid_list,
    uid_or_empty,
)

COUNT = Setting("max_count", integer(0), "an integer >= 0", 5, "How many.")
FLAG = Setting("dry_run", boolean, "a boolean", False, "Do nothing.")
TAGS = Setting("tags", tag_list, "comma-separated tags", (), "Tags.", repeat=True)
NAME = Setting("name", text, "a name", "", "A name.")
TABLE = (COUNT, FLAG, TAGS, NAME)


class TestSetting:
    def test_flag_and_env_should_be_derived_from_the_name(self):
        """Test that a setting's flag and variable follow its attribute name."""
        assert COUNT.flag == "--max-count"
        assert COUNT.env == "LEAKYPOOL_MAX_COUNT"

    def test_convert_should_strip_the_raw_text_before_parsing(self):
        """Test that surrounding white space (a variable written with a newline) does not fail the parse."""
        assert COUNT.convert("  7\n", "--max-count") == 7

    def test_convert_should_raise_a_config_error_naming_source_expectation_and_value_when_invalid(self):
        """Test that a parser's ValueError becomes one ConfigError line that says what to fix."""
        with pytest.raises(pool.ConfigError) as info:
            COUNT.convert("-3", "LEAKYPOOL_MAX_COUNT")
        assert str(info.value) == "LEAKYPOOL_MAX_COUNT: expected an integer >= 0, got '-3'"
        assert info.value.__cause__ is None and info.value.__suppress_context__

    def test_convert_should_redact_a_password_when_a_url_is_refused(self):
        """Test that a refused URL is quoted without its password."""
        url = Setting("store", store_url, "a job store URL", "", "Where.")
        with pytest.raises(pool.ConfigError) as info:
            url.convert("mysql://app:s3cret@db/app", "--store")
        assert "s3cret" not in str(info.value) and "app:***@db/app" in str(info.value)


class TestResolve:
    def test_resolve_should_prefer_explicit_over_environment_over_default(self):
        """Test the precedence, setting by setting."""
        environ = {"LEAKYPOOL_MAX_COUNT": "9", "LEAKYPOOL_DRY_RUN": "yes", "LEAKYPOOL_NAME": "env"}
        values = resolve(TABLE, {"max_count": 3, "name": None}, environ)
        assert values == {"max_count": 3, "dry_run": True, "tags": (), "name": "env"}

    def test_resolve_should_ignore_the_environment_when_it_is_none(self):
        """Test that ``environ=None`` gives the defaults for everything not explicit."""
        assert resolve(TABLE, {}, None) == {"max_count": 5, "dry_run": False, "tags": (), "name": ""}

    def test_resolve_should_name_the_variable_when_its_value_is_invalid(self):
        """Test that a bad variable is reported by its name."""
        with pytest.raises(pool.ConfigError, match=r"^LEAKYPOOL_MAX_COUNT: expected an integer >= 0, got 'many'$"):
            resolve(TABLE, {}, {"LEAKYPOOL_MAX_COUNT": "many"})

    @given(
        max_count=st.integers(0, 10**9),
        dry_run=st.booleans(),
        tags=st.lists(st.from_regex(r"[a-z0-9_-]{1,8}", fullmatch=True), max_size=4).map(tuple),
        name=st.from_regex(r"[A-Za-z0-9_.-]{0,12}", fullmatch=True),
    )
    def test_resolve_should_invert_to_env_when_values_are_valid(self, max_count, dry_run, tags, name):
        """Test the round trip: the variables `to_env` writes resolve back to the same values."""
        values = {"max_count": max_count, "dry_run": dry_run, "tags": tags, "name": name}
        assert resolve(TABLE, {}, to_env(TABLE, values)) == values


class TestToEnv:
    def test_to_env_should_write_booleans_as_digits_and_tuples_comma_separated(self):
        """Test the variables' spelling."""
        env = to_env(TABLE, {"max_count": 2, "dry_run": True, "tags": ("a", "b"), "name": "x"})
        assert env == {
            "LEAKYPOOL_MAX_COUNT": "2",
            "LEAKYPOOL_DRY_RUN": "1",
            "LEAKYPOOL_TAGS": "a,b",
            "LEAKYPOOL_NAME": "x",
        }
        assert to_env((FLAG,), {"dry_run": False}) == {"LEAKYPOOL_DRY_RUN": "0"}


class TestNumbers:
    @pytest.mark.parametrize(("raw", "ok"), [("0", False), ("1", True), ("10", True), ("11", False), ("x", False)])
    def test_integer_should_accept_only_values_within_its_bounds(self, raw, ok):
        """Test both bounds of ``integer(1, 10)``, inclusive."""
        parse = integer(1, 10)
        if ok:
            assert parse(raw) == int(raw)
        else:
            with pytest.raises(ValueError):
                parse(raw)

    def test_integer_should_have_no_upper_bound_when_high_is_none(self):
        """Test an open range."""
        assert integer(0)("123456789012") == 123456789012

    @pytest.mark.parametrize("raw", ["-1", "-0.001", "nan", "inf", "soon"])
    def test_seconds_should_refuse_what_is_not_a_finite_duration_at_least_zero(self, raw):
        """Test that negative, NaN, infinite and non-numeric durations are refused."""
        with pytest.raises(ValueError):
            seconds(raw)

    def test_seconds_should_accept_zero_and_fractions(self):
        """Test that 0 ("never") and a fraction parse as floats."""
        assert seconds("0") == 0.0 and seconds("2.5") == 2.5

    def test_positive_seconds_should_refuse_zero(self):
        """Test that a duration that must be positive refuses 0 and accepts a fraction."""
        with pytest.raises(ValueError):
            positive_seconds("0")
        assert positive_seconds("0.25") == 0.25

    @given(st.integers(1, 2**50))
    def test_size_bytes_should_read_back_a_plain_byte_count(self, n):
        """Test that a count of bytes written as digits parses to itself (sizes in units: test_recycle.py)."""
        assert size_bytes(str(n)) == n


class TestWords:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [("1", True), ("TRUE", True), ("yes", True), ("On", True), ("0", False), ("false", False), ("", False)],
    )
    def test_boolean_should_read_the_usual_spellings_case_insensitively(self, raw, expected):
        """Test 1/0, true/false, yes/no, on/off and empty as false."""
        assert boolean(raw) is expected

    def test_boolean_should_refuse_anything_else(self):
        """Test that a misspelling is an error, not false."""
        with pytest.raises(ValueError):
            boolean("maybe")

    def test_choice_should_accept_only_its_options_exactly(self):
        """Test that a choice is case-sensitive and refuses other words."""
        parse = choice("lan", "local")
        assert parse("lan") == "lan"
        for raw in ("LAN", "dns", ""):
            with pytest.raises(ValueError):
                parse(raw)

    @pytest.mark.parametrize("raw", ["_leakypool._tcp.local.", "_a._tcp.local.", "_fifteen-chars-x._tcp.local."])
    def test_dns_sd_type_should_accept_a_tcp_service_in_local(self, raw):
        """Test service types up to RFC 6763's 15 characters after the underscore."""
        assert dns_sd_type(raw) == raw

    @pytest.mark.parametrize(
        "raw",
        [
            "_leakypool._tcp.local",  # no trailing dot
            "_leakypool._udp.local.",
            "leakypool._tcp.local.",  # no leading underscore
            "_._tcp.local.",  # empty name
            "_sixteen-chars-xx._tcp.local.",
            "_a._tcp.example.",
        ],
    )
    def test_dns_sd_type_should_refuse_other_names(self, raw):
        """Test each way a service type can be wrong."""
        with pytest.raises(ValueError):
            dns_sd_type(raw)

    def test_uid_or_empty_should_canonicalise_a_uuid_and_keep_empty(self):
        """Test that an upper-case UUID comes back canonical and empty means "generate one"."""
        uid = uuid.uuid4()
        assert uid_or_empty(str(uid).upper()) == str(uid)
        assert uid_or_empty("") == ""
        with pytest.raises(ValueError):
            uid_or_empty("not-a-uuid")


class TestLists:
    def test_ipv4_list_should_split_commas_and_drop_blanks(self):
        """Test a list of addresses with spaces and an empty item."""
        assert ipv4_list(" 10.0.0.1, ,127.0.0.1 ") == ("10.0.0.1", "127.0.0.1")
        assert ipv4_list("") == ()

    @pytest.mark.parametrize("raw", ["eth0", "10.0.0.256", "::1"])
    def test_ipv4_list_should_refuse_what_is_not_an_ipv4_address(self, raw):
        """Test names, out-of-range octets and IPv6."""
        with pytest.raises(ValueError):
            ipv4_list(raw)

    def test_uid_list_should_read_numbers_and_refuse_negative_ones(self):
        """Test user ids."""
        assert uid_list("0, 1000,") == (0, 1000)
        with pytest.raises(ValueError):
            uid_list("1000,-1")
        with pytest.raises(ValueError):
            uid_list("root")

    def test_tag_list_should_strip_tags_and_refuse_one_with_a_space(self):
        """Test that tags are trimmed, blanks dropped, and a space inside one refused."""
        assert tag_list(" gpu ,,eu ") == ("gpu", "eu")
        with pytest.raises(ValueError):
            tag_list("big gpu")


class TestIndirect:
    def test_indirect_should_read_the_first_line_of_a_file_when_given_at_path(self, tmp_path):
        """Test ``@PATH``: the first line, stripped; the rest of the file is ignored."""
        path = tmp_path / "url"
        path.write_text("  postgresql://app:pw@db/app \nsecond line\n")
        assert indirect(f"@{path}") == "postgresql://app:pw@db/app"

    def test_indirect_should_raise_naming_the_file_when_it_cannot_be_read(self, tmp_path):
        """Test that a missing file is a ValueError naming the path and why."""
        missing = tmp_path / "missing"
        with pytest.raises(ValueError, match=f"^{re.escape(str(missing))}: No such file or directory$"):
            indirect(f"@{missing}")

    @pytest.mark.parametrize("content", ["", "\n", "  \nsecond line\n"])
    def test_indirect_should_raise_when_the_file_is_empty(self, tmp_path, content):
        """Test that a mounted secret not yet filled in is an error naming it, never "" (no store, for a URL)."""
        path = tmp_path / "url"
        path.write_text(content)
        with pytest.raises(ValueError, match=f"^{re.escape(str(path))} is empty$"):
            indirect(f"@{path}")

    def test_indirect_should_read_a_variable_when_given_env_name(self):
        """Test ``env:NAME`` against the environment passed in."""
        assert indirect("env:URL", {"URL": " sqlite:///x.db\n"}) == "sqlite:///x.db"

    @pytest.mark.parametrize("environ", [{}, {"URL": ""}])
    def test_indirect_should_raise_when_the_variable_is_unset_or_empty(self, environ):
        """Test that an unset or empty variable is an error naming it, never an empty value."""
        with pytest.raises(ValueError, match=r"^URL is not set$"):
            indirect("env:URL", environ)

    def test_indirect_should_return_anything_else_as_given(self):
        """Test that a plain value passes unchanged."""
        assert indirect("sqlite:///jobs.db", {}) == "sqlite:///jobs.db"


class TestStoreUrl:
    @pytest.mark.parametrize("raw", ["", "sqlite:///tmp/jobs.db", "postgresql://db/app", "postgres://db/app"])
    def test_store_url_should_accept_the_known_schemes_and_empty(self, raw):
        """Test the schemes a store can be opened with, and "no store"."""
        assert store_url(raw) == raw

    @pytest.mark.parametrize("raw", ["sqlite://jobs.db", "mysql://db/app", "jobs.db"])
    def test_store_url_should_refuse_other_urls(self, raw):
        """Test that a relative sqlite URL, another database or a bare path is refused."""
        with pytest.raises(ValueError):
            store_url(raw)

    def test_store_url_should_check_the_url_a_reference_points_at(self, tmp_path):
        """Test that ``@PATH`` is resolved first, then checked."""
        path = tmp_path / "url"
        path.write_text("sqlite:///jobs.db\n")
        assert store_url(f"@{path}") == "sqlite:///jobs.db"
        path.write_text("mysql://db/app\n")
        with pytest.raises(ValueError):
            store_url(f"@{path}")


class TestPathOrEmpty:
    def test_path_or_empty_should_accept_a_readable_file_and_empty(self, tmp_path):
        """Test a file that exists, and "not set"."""
        path = tmp_path / "cert.pem"
        path.write_text("x")
        assert path_or_empty(str(path)) == str(path)
        assert path_or_empty("") == ""

    def test_path_or_empty_should_refuse_a_missing_file_or_a_directory(self, tmp_path):
        """Test that only a regular file passes."""
        for raw in (str(tmp_path / "missing"), str(tmp_path)):
            with pytest.raises(ValueError):
                path_or_empty(raw)

    @pytest.mark.skipif(os.getuid() == 0, reason="root reads any file")
    def test_path_or_empty_should_refuse_a_file_this_user_cannot_read(self, tmp_path):
        """Test that a file without read permission is refused where it is named."""
        path = tmp_path / "key.pem"
        path.write_text("x")
        path.chmod(0)
        with pytest.raises(ValueError):
            path_or_empty(str(path))


class TestIsLoopback:
    @pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"])
    def test_is_loopback_should_be_true_when_the_host_is_this_machine_only(self, host):
        """Test the name, the whole 127/8 block and IPv6's loopback, bracketed or not."""
        assert is_loopback(host)

    @pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.com", "localhost.example.com", ""])
    def test_is_loopback_should_be_false_when_others_can_reach_the_host(self, host):
        """Test wildcards, other addresses and names."""
        assert not is_loopback(host)


class TestSecretText:
    def test_secret_text_should_read_a_file_or_a_variable_so_no_command_line_carries_it(self, tmp_path, monkeypatch):
        """Test issue 51 finding 9: --metrics-token @FILE and env:NAME, as for the store and registry URLs."""
        from pool._config._parse import secret_text

        token = tmp_path / "token"
        token.write_text("s3cret\n")
        monkeypatch.setenv("LP_TEST_TOKEN", "from-env")
        assert secret_text(f"@{token}") == "s3cret"
        assert secret_text("env:LP_TEST_TOKEN") == "from-env"
        assert secret_text("plain") == "plain" and secret_text("") == ""
        with pytest.raises(ValueError, match="is not set"):
            secret_text("env:LP_TEST_TOKEN_MISSING")
