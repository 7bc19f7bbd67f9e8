"""``crosscheck.Port``: a PyTorch module and its JAX port, declared with the real objects.

Nothing here imports a framework: the port is prepared (its mapping built, its sides described) the
first time it is used, by ``crosscheck._workloads.port.declare.build``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crosscheck._workloads.port.declare.fields import PortFields

if TYPE_CHECKING:
    from crosscheck._workloads.port.declare.build import Prepared
    from crosscheck._workloads.port.mapping.table import Table


class Port(PortFields):
    """A PyTorch model and its JAX port, checked module by module and gradient by gradient.

    The PyTorch ``state_dict`` is mapped onto the JAX model's parameters by name and layout (see
    ``mapping``: the table is shown before any numerics, ambiguities are refused), the weights are
    copied through the mapping, and each side's loss is differentiated by its own framework. The
    gradients come back in PyTorch's names; every module's output is compared within its measured
    rounding, and the verdict names the first module that differs. It runs as a workload:
    ``crosscheck.run(workload=port)``, ``crosscheck run --workload module:port``, sweeps, the pytest
    helper.

    Args:
        name: a short name, shown in reports.
        torch: the original, a ``torch.nn.Module`` in eval mode (checked each time the port is used, not
            when it is made); its parameters are the point checked.
        jax: the port: a Flax linen or nnx module (nnx: in eval mode), an Equinox module, or a
            function ``fn(params, **inputs)``.
        inputs: the PyTorch side's inputs, ``name -> array`` (NumPy arrays or tensors), or a function
            ``(rng, dtype) -> dict`` that makes them (floating-point inputs take the case's dtype).
        jax_params: for a function ``jax``: its parameter pytree (values are replaced by the mapped
            PyTorch weights; only the structure and shapes count). Flax and Equinox models give theirs.
        jax_inputs: ``inputs -> inputs`` for the JAX side (layout: ``x.transpose(0, 2, 3, 1)`` for NHWC);
            default: the same inputs.
        torch_call: ``(module, inputs) -> output`` (default ``module(**inputs)``).
        jax_call: ``(model, inputs) -> output`` (default ``model(**inputs)``; ``model`` is the bound linen
            module, the nnx module, the Equinox module, or the function with its parameters).
        jax_intermediates: for an Equinox module or a function (a linen or nnx module's are captured
            without it): the PyTorch modules, by ``named_modules()`` name (``name#2``: its second
            call), whose outputs the JAX forward pass returns beside its own: ``jax_call`` (or the model) then
            returns ``(output, {name: array})`` with exactly these names. They are compared with the
            PyTorch modules' outputs like a linen module's, and the verdict names the first that
            differs. The values come from the very forward pass whose gradient is checked (a separate
            function could compute them right while the forward is wrong) and need no tracing trick,
            so ``jax.vmap`` and ``jax.jit`` inside work; the names are checked when the port is
            prepared, against the PyTorch modules and the shapes of their outputs. A name with one ``*``
            (``layers.*.linear``) stands for ``layers.0.linear`` to ``layers.{L-1}.linear``: the call returns
            one array ``(L, ...)`` for it (a scan's per-step outputs, stacked), split into one per layer.
        output: ``output -> array`` (or a pytree of arrays) on both sides, what the loss sees (default:
            the whole output).
        loss: ``array -> scalar`` on both sides, given ``output``'s pick (default: the first array). The
            default loss is a fixed random projection of every floating-point array of the output
            (``sum_i sum(R_i * a_i)``, Hugging Face ``ModelOutput`` fields, tuples and dicts paired by
            position), so that every output (a pooler's too) reaches it.
        overrides: ``PyTorch name or glob pattern -> transform`` (``"transpose"``, ``"identity"``,
            ``"OIHW->HWIO"``, ``"unit axes"``, a permutation tuple), ``-> "jax/path"``, ``-> ("jax/path",
            transform)`` or ``-> None`` (leave it unmapped: the PyTorch model keeps its value, its gradient is
            not checked, and the table and the report say so). A pattern's ``*`` are captured: each ``*`` of a
            target path takes the pattern's ``*`` at its position (``{1}``: the first), so ``{"layer.*.w":
            "params/layer_*/kernel"}`` covers every layer. A list splits a fused PyTorch tensor, in
            order, along its first axis, each part a path or ``(path, transform)``:
            ``{"attn.in_proj_weight": [("params/attn/query/kernel", "transpose"),
            ("params/attn/key/kernel", "transpose"), ("params/attn/value/kernel", "transpose")]}``;
            ``{"axis": 1, "parts": [...]}`` splits along another axis; ``("jax/path", transform,
            ((axis, start, stop), ...))`` puts a tensor into that box of a leaf (a part of a fused
            ``qkv``). Fused and split projections, head axes and tied weights are mostly mapped with
            no override (the port guide's "When your port is not one-to-one").
            ``-> ("jax/path", transform, "stacked")`` (or
            ``("jax/path", "stacked")``: the layouts decide the transform) maps each tensor onto one layer of
            a stacked leaf ``(L, ...)``, the pattern's first ``*`` its index: ``{"layers.*.linear.weight":
            ("params/layers/linear/kernel", "transpose", "stacked")}``; the tensor is reshaped to the
            layer (head axes), and ``("jax/path", transform, ((axis, start, stop), ...), "stacked")``
            puts it into that box of the layer (axes counted within one layer). A scanned port's
            stacked leaves are found without it where the names tell (``layers/linear/kernel``
            ``(L, ...)`` for ``layers.{i}.linear.weight``); the override decides where they do not or
            are ambiguous.
        convert: your own conversion, ``fn(torch_arrays) -> JAX parameter pytree``, in place of the
            automatic mapping (not with ``overrides``): ``torch_arrays`` is the ``state_dict``, PyTorch
            name -> array (a tied alias such as ``lm_head.weight`` included), and ``fn`` is written with
            ``jax.numpy`` (NumPy where it is traceable). When the port is prepared, ``fn``'s result is
            checked against the JAX model's leaves (structure, shapes, floating dtype: one line naming the
            first that does not fit) and ``fn`` must be linear in the weights (``fn(a + 2b) == fn(a) + 2
            fn(b)``: stacking, splitting, concatenating, reshaping, transposing, scaling, permuting rows),
            else it is refused naming the first leaf that is not. The check calls ``fn`` inside the
            differentiated function, so the gradients come back in PyTorch's names through its
            transpose (a tensor used twice: the sum of both uses). The mapping table shows, for each
            PyTorch tensor, the JAX leaves it reaches (transform ``convert``). For a function ``jax``,
            ``jax_params`` may be left out: ``fn``'s result is the parameter pytree.
        unused: PyTorch names or glob patterns (``("pooler.*",)``) of parameters declared out of scope:
            the loss does not reach them (no autograd path from them to it, their gradient zero in
            every implementation, confirmed by the oracle). Such a parameter that is not declared
            counts as not checked and fails the run, with a hint; a declared one is said in the report
            and does not fail it.
        description: one line, shown by ``crosscheck list``.
        output_layout: the layout of the JAX output against PyTorch's, where the values cannot tell
            it (otherwise it is proven by them: an NHWC image against NCHW, ``(B, H, W, C)`` against
            ``(B, C, H*W)``): the JAX output's axes in PyTorch's order, as ``np.transpose`` takes them
            (``(0, 3, 1, 2)`` for NHWC against NCHW; then merged or split into PyTorch's shape where it
            differs), ``"NHWC"`` for channels last, or a list with one per floating-point array of the
            output (None: proven by the values). The default loss draws its projection in PyTorch's
            layout and projects it onto the JAX output's; the model's output is compared in PyTorch's.

    Example:
        >>> port = crosscheck.Port(  # doctest: +SKIP
        ...     name="convnet", torch=TorchNet().eval(), jax=FlaxNet(),
        ...     inputs={"x": x_nchw}, jax_inputs=lambda i: {"x": i["x"].transpose(0, 2, 3, 1)},
        ... )
        >>> print(port.mapping)  # doctest: +SKIP
    """

    @property
    def prepared(self) -> Prepared:
        """The port prepared (``build.Prepared``): its sides, mapping and workload; built once. The
        PyTorch module's training mode is checked at each use (``PortFields.check_in_use``).

        Raises:
            ValueError: the PyTorch module is in training mode with a dropout that drops at random;
                whatever ``build.prepare`` raises.
        """
        self.check_in_use()
        cached = self.__dict__.get("_prepared")
        if cached is None:
            from crosscheck._workloads.port.declare.build import prepare

            cached = prepare(self)
            object.__setattr__(self, "_prepared", cached)
        return cached

    @property
    def mapping(self) -> Table:
        """The mapping table (``print(port.mapping)``): what was mapped to what, how, and what was not."""
        return self.prepared.table
