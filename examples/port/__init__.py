"""Ports of real models checked with ``crosscheck.Port`` (see docs/guides/port.md)."""
