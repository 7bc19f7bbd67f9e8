"""The engine: one plan, one guarded call per backend call, one driver for every path."""
