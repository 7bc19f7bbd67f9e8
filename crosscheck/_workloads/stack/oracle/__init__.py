"""The stack's finite-difference oracle: estimates (``fd``), batched perturbed passes (``perturb``),
the HVP oracle (``hvp``), and its worker threads (``parallel``)."""
