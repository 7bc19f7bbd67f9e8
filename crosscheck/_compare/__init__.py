"""Comparison: a candidate against a reference, entry by entry, into records (never raises)."""
