"""Workloads: what is differentiated (parameters, inputs, losses) and how its reference is judged."""
