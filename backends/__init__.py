"""Built-in backend adapters, one module each, all of the same shape.

Each module defines one class with a ``name``, a ``grad(weights, x)`` method that takes and returns
NumPy arrays, and an ``info()`` method; it imports its framework when the module is imported, so the
registry in ``crosscheck._backends`` imports a module only when its backend is used.
"""
