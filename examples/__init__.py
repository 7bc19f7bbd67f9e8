"""Examples of crosscheck workloads (importable from the repository root: ``examples.gelu_port...``)."""
