"""Durable jobs: the store protocol, the SQLite store (default), the scheduler."""
