"""The trio-free kernel: the sender/receiver protocol, completion tags, environments and
queries, domains and connect, stop tokens, completion signatures, errors, the trampoline,
the late-bound hooks the upper layers fill in, the shared adaptor bases and the coroutine
driver. Nothing here imports trio (tests/test_import_layers.py checks it).
"""
