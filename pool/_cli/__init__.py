"""The operator's command line: ``leakypool status | jobs | pause | resume``.

    _main         the ``leakypool`` command: its sub-commands
    _jobs         ``leakypool jobs STORE_URL list|show|retry|cancel|purge`` (rich tables, ``--json``)
    _pause        ``leakypool jobs STORE_URL pause|resume NAME``
    _status_view  ``leakypool status ADDRESS``: the live terminal view of a pool's /status
    _columns      tables that fit the terminal: which columns to keep, one line each

The public surface's: it may use any layer (it opens stores, reads /status).
"""
