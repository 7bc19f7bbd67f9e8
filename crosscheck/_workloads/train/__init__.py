"""Training-step parity: a ``Port`` trained K optimizer steps on each side (``crosscheck.Train``)."""
