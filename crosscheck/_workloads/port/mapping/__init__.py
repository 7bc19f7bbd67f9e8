"""The mapping of a port: PyTorch ``state_dict`` names onto JAX leaves, a linear map from PyTorch's
arrays to the JAX pytree. Matching by name (``matching``), the patterns that are not one-to-one
(``fused``, ``stacked``), the user's ``overrides``, how the leaves are assembled from the pieces
(``assemble``), and the table the user reads (``table``). No framework is imported here."""
