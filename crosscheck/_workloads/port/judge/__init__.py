"""How a port is judged: the engine's view (``workload``), the gradient judge with every module's
output (``gradient``) and the forward check (``forward``); the captures (``capture``), the pairs of
modules compared (``pairs``), their comparison and the verdict (``localize``, ``verdict``), modules cut
apart differently (``boundaries``), the original's own proof (``own``) and constants the original keeps
in float32 (``constants``)."""
