"""The stack's judges: the gradient (``grad``, ``screen``) and the Hessian-vector product (``hvp``,
``hvp_screen``)."""
