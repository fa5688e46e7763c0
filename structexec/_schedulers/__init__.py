"""Schedulers and consumers that need no trio: inline_scheduler, run_loop and sync_wait.
"""
