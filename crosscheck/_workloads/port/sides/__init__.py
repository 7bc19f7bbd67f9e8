"""The two sides of a port: PyTorch's (``torch_side``) and the JAX port's (``jax_side``: Flax linen,
Equinox or a function; ``nnx_side``: Flax nnx), each described by its tensors, its loss and its modules'
calls; ``steps`` ships module outputs out of a scan. Imported only when a port is used (they import
the frameworks)."""
