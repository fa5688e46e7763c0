"""Async scopes: the association state machine, simple_counting_scope and counting_scope
(also as trio nurseries), spawn, spawn_future and associate.
"""
