"""Tools beside the cross-check: ``inspect`` (scan and checkpointing), ``memory``, ``cost``."""
