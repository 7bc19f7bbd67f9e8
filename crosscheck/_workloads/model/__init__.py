"""A user's ``Workload``: its declaration, the engine's view of it, its judge, comparison, measured
rounding and the summary of what a run found."""
