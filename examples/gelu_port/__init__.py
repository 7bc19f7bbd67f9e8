"""A two-layer GELU MLP ported from PyTorch to JAX: a buggy port and the fixed one (see README.md)."""
