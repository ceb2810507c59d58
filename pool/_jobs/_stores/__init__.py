"""The databases jobs live in: SQLite (the embedded default) and PostgreSQL (several hosts).

    _open              store= URL or object -> a store
    _sqlite            SQLiteStore: one file, WAL, several processes on one host
    _sqlite_thread     the thread that owns its connection and group-commits
    _sqlite_schema     its schema, migrations and shared statements
    _postgres          PostgresStore: asyncpg, SKIP LOCKED leases, advisory locks for limits
    _postgres_batched  its hot writes (submit, mark running, finish), group committed
    _postgres_sql      its schema and statements (text only)
    _postgres_link     reaching the server: asyncpg on demand, one-line errors, LISTEN/NOTIFY
    _postgres_admin    schema upgrades, retention, operator verbs, a submit in the caller's transaction
    _batch             group commit for a networked store (concurrent writes share a statement)
    _retry             every store call rides over a lost connection for store_retry seconds
    _pauses            paused queues, kept in the store (both stores)
    _strays            what the store has an owner hold beyond what it runs, given back

Each implements `pool._jobs._store.JobStore`; nothing here knows the scheduler.
"""
