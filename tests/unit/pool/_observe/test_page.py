"""Tests for the page's file (self-contained) and for reaching a token-guarded port from the status view."""

from __future__ import annotations

import re

import pytest

from pool._cli._status_view import status_url
from pool._observe._page import page_html


def test_page_should_load_nothing_from_elsewhere():
    """Test "no CDN, no build step": no external script, style, font or image, and a poll of /status."""
    page = page_html().decode()
    assert page.startswith("<!doctype html>") and "<script>" in page and "<style>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//""", page)
    assert 'fetch("/status"' in page


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1:9100", "http://127.0.0.1:9100/status"),
        ("http://h:9100/", "http://h:9100/status"),
        ("http://h:9100/status", "http://h:9100/status"),
        ("http://h:9100/?token=s3cret", "http://h:9100/status?token=s3cret"),
        ("h:9100?token=a%20b", "http://h:9100/status?token=a%20b"),
    ],
)
def test_status_url_should_keep_a_token_query(address, url):
    """Test ``leakypool status`` against a port that needs a token (``?token=`` in the address)."""
    assert status_url(address) == url
