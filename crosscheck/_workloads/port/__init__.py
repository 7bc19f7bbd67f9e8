"""Ports of real models (``crosscheck.Port``), cut by the pipeline a check runs, bottom to top:

- ``mapping/``: how PyTorch's tensors become the JAX leaves, as a linear map and its table (pure Python
  and NumPy, no framework);
- ``sides/``: each side described and run, PyTorch's and the JAX port's (linen, nnx, Equinox, a
  function), their module calls recorded, scans included;
- ``declare/``: ``Port`` itself, its fields and problems, a user's ``convert=`` and listed
  intermediates, and the prepared port (``build``) that the judges run;
- ``judge/``: the engine's view of a port and its judges (the gradients with every module's output,
  the forward check), the verdict and where it starts;
- ``blocks/``: ``Blocks``, a model checked block by block (beside ``judge/``).

An import-linter layers contract (``pyproject.toml``) keeps them in this order.
"""
