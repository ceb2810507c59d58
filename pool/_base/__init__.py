"""What every layer of both processes stands on: owned background tasks, child processes, worker uids.

_tasks    TaskOwner: every background task has an owner that ends it
_process  child processes on the event loop: exit watching, safe forking
_ids      time-ordered worker uids
_random   the one random generator (jitter)
_exit     exit statuses a worker uses on purpose (EXIT_RETIRED: recycled, not crashed)
_redact   passwords out of URLs, commands and messages before they are logged
_public   public names under their public path (what is pickled names pool.X)
_lost     whether a store error means "out of reach" (retry) or refused (do not): both sides use it
_role     which side of the pool this process is on
_private  directories that carry trust: 0700, this user's, checked on every open
"""
