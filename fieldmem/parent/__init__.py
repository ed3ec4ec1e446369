"""The parent process of a check, which never imports jax: it schedules targets (checker), decides each
target's result from its readings (decide), starts and supervises the worker processes that read them
(spawn, isolate, supervisor, worker_process, remote_readers), picks the Python they run under
(interpreters, envs, env_records, env_install), and drives
``fieldmem fit``'s search (fit)."""
