"""The trio bridge: awaiting senders from trio tasks, coroutine senders hosted as trio
tasks, the trio scheduler and the shared helpers for reaching the trio thread.
"""
