"""bulk: being written; see the issue that owns it."""

__all__: list[str] = []
