"""PyTorch: the stack's adapters (``stack``), a workload's adapter (``workload``), the inspect watcher
(``walk``)."""
