"""Settings both processes read: flags and ``LEAKYPOOL_*`` variables, how their values parse, places on disk.

    _settings  PoolConfig and WorkerConfig: every setting, its flag, variable, default and check
    _parse     the values' parsers (durations, sizes, addresses), each failing with one line naming the setting
    _places    where things live by default: the per-user secret, the local registry

A foundation: imported from every layer, it imports nothing of pool but the error tree.
"""
