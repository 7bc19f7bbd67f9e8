"""Small healthy workloads whose ports are correct: the calibration set of the workload tolerances.

A tanh MLP, a softmax classifier, a self-attention head and a ReLU MLP, each in NumPy, JAX and PyTorch.

``benchmarks/calibrate_workloads.py`` runs them (and the GELU port) over many seeds; ``tests/`` runs a few.
"""

from __future__ import annotations

import numpy as np

import crosscheck


def _tanh_np(p, i):
    h = np.tanh(i["x"] @ p["w1"] + p["b1"])
    h = np.tanh(h @ p["w2"] + p["b2"])
    return float(np.sum((h @ p["w3"] - i["target"]) ** 2))


def _tanh_jax(p, i):
    import jax.numpy as jnp

    h = jnp.tanh(i["x"] @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return jnp.sum((h @ p["w3"] - i["target"]) ** 2)


def _tanh_torch(p, i):
    import torch

    h = torch.tanh(i["x"] @ p["w1"] + p["b1"])
    h = torch.tanh(h @ p["w2"] + p["b2"])
    return torch.sum((h @ p["w3"] - i["target"]) ** 2)


#: A three-layer tanh MLP with a sum-of-squares loss.
tanh_mlp = crosscheck.Workload(
    name="tanh-mlp",
    parameters={"w1": (6, 16), "b1": (16,), "w2": (16, 16), "b2": (16,), "w3": (16, 2)},
    inputs={"x": (32, 6), "target": (32, 2)},
    reference=_tanh_np,
    implementations={"jax": _tanh_jax, "torch": _tanh_torch},
    description="three-layer tanh MLP, sum of squares",
)


def _softmax_np(p, i):
    logits = i["x"] @ p["w"] + p["b"]
    top = logits.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.sum(np.exp(logits - top), axis=1))
    picked = np.sum(logits * i["onehot"], axis=1)
    return float(np.mean(log_z - picked))


def _softmax_jax(p, i):
    import jax
    import jax.numpy as jnp

    logits = i["x"] @ p["w"] + p["b"]
    return jnp.mean(-jnp.sum(jax.nn.log_softmax(logits) * i["onehot"], axis=1))


def _softmax_torch(p, i):
    import torch

    logits = i["x"] @ p["w"] + p["b"]
    return torch.mean(-torch.sum(torch.log_softmax(logits, dim=1) * i["onehot"], dim=1))


def _softmax_generate(rng, dtype):
    x = rng.standard_normal((24, 10))
    labels = rng.integers(0, 5, size=24)
    params = {"w": rng.standard_normal((10, 5)) / np.sqrt(10), "b": 0.1 * rng.standard_normal(5)}
    return params, {"x": x, "onehot": np.eye(5)[labels]}


#: A softmax classifier with the mean cross-entropy (inputs include one-hot labels).
softmax = crosscheck.Workload(
    name="softmax",
    parameters={"w": (10, 5), "b": (5,)},
    inputs={"x": (24, 10), "onehot": (24, 5)},
    reference=_softmax_np,
    implementations={"jax": _softmax_jax, "torch": _softmax_torch},
    generate=_softmax_generate,
    description="softmax classifier, mean cross-entropy",
)


def _attention_np(p, i):
    q, k, v = i["x"] @ p["wq"], i["x"] @ p["wk"], i["x"] @ p["wv"]
    s = q @ k.T / np.sqrt(q.shape[1])
    s = np.exp(s - s.max(axis=1, keepdims=True))
    out = (s / s.sum(axis=1, keepdims=True)) @ v
    return float(np.sum(out**2))


def _attention_jax(p, i):
    import jax
    import jax.numpy as jnp

    q, k, v = i["x"] @ p["wq"], i["x"] @ p["wk"], i["x"] @ p["wv"]
    return jnp.sum((jax.nn.softmax(q @ k.T / jnp.sqrt(q.shape[1]), axis=1) @ v) ** 2)


def _attention_torch(p, i):
    import torch

    q, k, v = i["x"] @ p["wq"], i["x"] @ p["wk"], i["x"] @ p["wv"]
    return torch.sum((torch.softmax(q @ k.T / q.shape[1] ** 0.5, dim=1) @ v) ** 2)


#: One head of self-attention, sum of squares of its output.
attention = crosscheck.Workload(
    name="attention",
    parameters={"wq": (8, 4), "wk": (8, 4), "wv": (8, 4)},
    inputs={"x": (12, 8)},
    reference=_attention_np,
    implementations={"jax": _attention_jax, "torch": _attention_torch},
    description="one self-attention head, sum of squares",
)


def _relu_np(p, i):
    h = np.maximum(i["x"] @ p["w1"] + p["b1"], 0.0)
    return float(np.sum((h @ p["w2"]) ** 2))


def _relu_jax(p, i):
    import jax
    import jax.numpy as jnp

    return jnp.sum((jax.nn.relu(i["x"] @ p["w1"] + p["b1"]) @ p["w2"]) ** 2)


def _relu_torch(p, i):
    import torch

    return torch.sum((torch.relu(i["x"] @ p["w1"] + p["b1"]) @ p["w2"]) ** 2)


#: A ReLU MLP: kinks everywhere, none exactly at a generated point (random float inputs).
relu_mlp = crosscheck.Workload(
    name="relu-mlp",
    parameters={"w1": (5, 12), "b1": (12,), "w2": (12, 3)},
    inputs={"x": (20, 5)},
    reference=_relu_np,
    implementations={"jax": _relu_jax, "torch": _relu_torch},
    description="two-layer ReLU MLP, sum of squares",
)

WORKLOADS = [tanh_mlp, softmax, attention, relu_mlp]
