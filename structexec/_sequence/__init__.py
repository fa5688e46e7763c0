"""Sequence senders: streams of items with backpressure (private; re-exported by the facade)."""
