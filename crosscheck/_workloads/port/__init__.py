"""Ports of real models: ``crosscheck.Port`` (declare), the mapping, the module-by-module judge."""
