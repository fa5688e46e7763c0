"""Sender factories and adaptors, one [exec.X] section per module (just, then, let_*,
when_all, bulk, into_variant, stopped_as_*, starts_on, continues_on, on, affine_on,
write_env, unstoppable, read_env, schedule, stop-when). Imports only _core.
"""
