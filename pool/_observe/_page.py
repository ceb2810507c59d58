"""The page ``GET /`` serves: ``page.html``, one self-contained file (inline CSS and JS, no CDN, no build step).

It polls ``/status`` on the port that served it, so one file serves a
pool's port and a worker's alike; the page tells the two documents apart.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def page_html() -> bytes:
    """The page's bytes, read from the package once."""
    return resources.files(__package__).joinpath("page.html").read_bytes()
