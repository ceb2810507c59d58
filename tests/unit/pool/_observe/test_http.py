"""Tests for pool._observe._http: the observation port, spoken to over a real socket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import pytest

from pool._observe import _http
from pool._observe._http import LINE_MAX_BYTES, MAX_HEADERS, PAGE_POLICY, ObservationServer, Rates
from pool._observe._page import page_html

METRICS = b"# TYPE leakypool_up gauge\nleakypool_up 1\n"


class Source:
    """What the port serves: metrics, a status document, and a refresh it records."""

    def __init__(self) -> None:
        self.refreshed = 0
        self.fail = False

    def metrics(self) -> bytes:
        return METRICS + f"refreshed {self.refreshed}\n".encode()

    async def status(self) -> dict:
        if self.fail:
            raise RuntimeError("status broke")
        return {"kind": "pool", "refreshed": self.refreshed}

    async def refresh(self) -> None:
        self.refreshed += 1


@contextlib.asynccontextmanager
async def serving(source: Source, **kwargs) -> AsyncIterator[ObservationServer]:
    server = ObservationServer(source.metrics, source.status, source.refresh, **kwargs)
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.aclose()


async def exchange(server: ObservationServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` and read the whole answer (HTTP/1.0: until the port hangs up); (0, {}, b"") for none."""
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            writer.write(raw)
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
    if not answer:
        return 0, {}, b""
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert int(headers["content-length"]) == len(body)
    return int(status.split()[1]), headers, body


def get(path: str, host: str = "127.0.0.1:9000", *extra: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class TestObservationServer:
    async def test_metrics_should_be_served_after_a_refresh_when_asked_for(self):
        """Test that /metrics refreshes what is slow to read, then serves the exposition, never cached."""
        source = Source()
        async with serving(source) as server:
            code, headers, body = await exchange(server, get("/metrics"))
        assert code == 200 and body == METRICS + b"refreshed 1\n"
        assert headers["content-type"].startswith("text/plain; version=0.0.4")
        assert headers["cache-control"] == "no-store"

    async def test_status_should_be_the_json_document_when_asked_for(self):
        """Test that /status serves the status document as JSON, after a refresh."""
        async with serving(Source()) as server:
            code, headers, body = await exchange(server, get("/status"))
        assert code == 200 and headers["content-type"] == "application/json"
        assert json.loads(body) == {"kind": "pool", "refreshed": 1}

    async def test_page_should_be_served_with_its_content_security_policy_when_asked_for(self):
        """Test that / serves the page, confined to its own script and this port, without a refresh."""
        source = Source()
        async with serving(source) as server:
            code, headers, body = await exchange(server, get("/"))
        assert code == 200 and body == page_html() and source.refreshed == 0
        assert headers["content-security-policy"] == PAGE_POLICY
        assert headers["x-content-type-options"] == "nosniff"

    async def test_serve_should_answer_404_when_the_path_is_unknown(self):
        """Test that another path is not found, and names the ones there are."""
        async with serving(Source()) as server:
            code, _, body = await exchange(server, get("/metrics/extra?x=1"))
        assert code == 404 and b"/metrics" in body

    async def test_serve_should_answer_405_when_the_method_is_not_get(self):
        """Test that only GET is served."""
        async with serving(Source()) as server:
            code, _, _ = await exchange(server, b"POST /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert code == 405

    async def test_serve_should_answer_500_and_keep_serving_when_the_status_raises(self, caplog):
        """Test that one request's fault is logged and answered 500, and the port goes on."""
        source = Source()
        source.fail = True
        async with serving(source) as server:
            with caplog.at_level(logging.ERROR, logger="leakypool.metrics"):
                code, _, _ = await exchange(server, get("/status"))
            assert code == 500 and "answering a request failed" in caplog.text
            code, _, _ = await exchange(server, get("/metrics"))
        assert code == 200

    def test_port_should_raise_runtime_error_when_not_started(self):
        """Test that asking an unstarted port for its number says so."""
        with pytest.raises(RuntimeError, match="not started"):
            _ = ObservationServer(Source().metrics, Source().status).port


class TestHost:
    @pytest.mark.parametrize(
        "host", ["127.0.0.1:9000", "127.0.0.1", "[::1]:9000", "[::1]", "LOCALHOST:80", "10.1.2.3", "Box.Lan:1"]
    )
    async def test_serve_should_answer_when_the_host_is_an_address_localhost_or_a_configured_name(self, host):
        """Test that IP addresses (v4, v6 in brackets), localhost and configured names pass, any case, any port."""
        async with serving(Source(), names=("box.lan",)) as server:
            code, _, _ = await exchange(server, get("/metrics", host))
        assert code == 200

    @pytest.mark.parametrize("host", ["evil.example", "evil.example:9000", "box.lan", "127.0.0.1.evil.example", ""])
    async def test_serve_should_answer_421_when_the_host_is_a_name_it_was_not_given(self, host, caplog):
        """Test that a rebinding page's own name (or no Host at all) reads nothing, and is logged once."""
        async with serving(Source()) as server:
            with caplog.at_level(logging.WARNING, logger="leakypool.metrics"):
                code, _, body = await exchange(server, get("/metrics", host))
        assert code == 421 and b"metrics_names" in body and b"leakypool_up" not in body
        assert "refused a request" in caplog.text

    async def test_serve_should_answer_421_when_no_host_header_is_sent(self):
        """Test that a request without a Host header is refused."""
        async with serving(Source()) as server:
            code, _, body = await exchange(server, b"GET /metrics HTTP/1.0\r\n\r\n")
        assert code == 421 and b"no Host header" in body


class TestToken:
    @pytest.mark.parametrize(
        "request_",
        [
            get("/metrics", "localhost", "Authorization: Bearer s3cret"),
            get("/metrics?token=s3cret", "localhost"),
            get("/metrics?a=1&token=s3cret&b=2", "localhost"),
        ],
        ids=["bearer", "query", "query-among-others"],
    )
    async def test_serve_should_answer_when_the_request_carries_the_token(self, request_):
        """Test that the token is accepted in the Authorization header or the query."""
        async with serving(Source(), token="s3cret") as server:
            code, _, _ = await exchange(server, request_)
        assert code == 200

    @pytest.mark.parametrize(
        "request_",
        [
            get("/metrics", "localhost"),
            get("/metrics", "localhost", "Authorization: Bearer s3cre"),
            get("/status?token=s3cretX", "localhost"),
            get("/", "localhost", "Authorization: Basic s3cret"),
            get("/metrics?token=s3cret", "localhost", "Authorization: Bearer wrong"),
        ],
        ids=["none", "short", "long", "basic", "wrong-header-wins"],
    )
    async def test_serve_should_answer_401_when_the_token_is_missing_or_wrong(self, request_):
        """Test that without the exact token nothing is read, not even the page, and no refresh runs."""
        source = Source()
        async with serving(source, token="s3cret") as server:
            code, _, body = await exchange(server, request_)
        assert code == 401 and b"token required" in body and source.refreshed == 0

    async def test_serve_should_answer_when_the_bearer_scheme_is_in_lower_case(self):
        """Test that the Authorization scheme is matched without regard to case (RFC 7235)."""
        async with serving(Source(), token="s3cret") as server:
            code, _, _ = await exchange(server, get("/metrics", "localhost", "Authorization: bearer s3cret"))
        assert code == 200


class TestMalformed:
    async def test_serve_should_answer_400_when_the_request_line_is_not_http(self):
        """Test that something other than an HTTP request line is refused."""
        async with serving(Source()) as server:
            code, _, body = await exchange(server, b"HELLO THERE\r\n\r\n")
        assert code == 400 and b"not an HTTP request line" in body

    async def test_serve_should_answer_414_when_the_request_line_is_too_long(self):
        """Test that a request line over LINE_MAX_BYTES is refused before it is read whole."""
        async with serving(Source()) as server:
            code, _, _ = await exchange(server, get("/" + "a" * LINE_MAX_BYTES))
        assert code == 414

    async def test_serve_should_answer_431_when_a_header_is_too_long(self):
        """Test that a header line over LINE_MAX_BYTES is refused."""
        async with serving(Source()) as server:
            code, _, _ = await exchange(server, get("/metrics", "localhost", "X-Big: " + "b" * LINE_MAX_BYTES))
        assert code == 431

    @pytest.mark.parametrize(("count", "code"), [(MAX_HEADERS - 1, 200), (MAX_HEADERS, 431)])
    async def test_serve_should_answer_431_only_when_there_are_more_headers_than_allowed(self, count, code):
        """Test the header count limit: MAX_HEADERS (Host included) pass, one more is refused."""
        extra = [f"X-H{i}: v" for i in range(count)]
        async with serving(Source()) as server:
            got, _, _ = await exchange(server, get("/metrics", "localhost", *extra))
        assert got == code

    async def test_serve_should_refuse_the_line_when_it_is_not_ascii(self):
        """Test that a request line that is not ASCII is refused as unreadable, with the request line's code."""
        async with serving(Source()) as server:
            code, _, _ = await exchange(server, "GET /é HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        assert code == 414  # (`_line` refuses a line it cannot read with the code given for that line)

    async def test_serve_should_hang_up_without_an_answer_when_the_client_never_finishes(self, monkeypatch):
        """Test that a client that stops half way through its headers is dropped after READ_TIMEOUT_S."""
        monkeypatch.setattr(_http, "READ_TIMEOUT_S", 0.05)
        async with serving(Source()) as server:
            assert await exchange(server, b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n") == (0, {}, b"")


class TestRates:
    def test_per_second_should_be_zero_when_first_read_and_grow_with_the_counter_after(self):
        """Test that the first read has nothing to compare with, and later reads follow the counter."""
        rates = Rates()
        assert rates.per_second(100) == 0.0
        assert rates.per_second(1100) > 0
        assert rates.per_second(1100) == 0.0
