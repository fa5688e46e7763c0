"""Coroutines: the ``task`` type ([exec.task]), its driver, environment and scheduler
(task_scheduler), and as_awaitable.
"""
