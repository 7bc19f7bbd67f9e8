"""Evidence beyond the gradient check, each a study of its own: ``inspect`` (what a backend's scan and
checkpointing really do), ``memory`` (what checkpointing saves, measured), ``cost`` (the flop cost of a
stack's gradient per backend) and ``ste`` (the straight-through estimator: the backends against its
surrogate, and the naive finite difference of the rounded loss beside it). The gradient check's own
cost estimates live with what they estimate (the model oracle's: ``_workloads.model.oracle.estimate``;
a case's memory: ``stack.size``)."""
