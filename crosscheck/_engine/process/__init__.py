"""The engine's worker processes: code of the user's or a backend's that runs in a fresh Python, so that
nothing it does (``os._exit``, a segfault, a hang past the timeout) ends the run with nothing said.

- ``isolate``: ``--isolate``, a backend in its own worker process (the parent's side: start, call, stop);
  ``isolate_worker``: that worker process, and the messages both sides send (``send``, ``receive``).
- ``contain``: a workload given as an import string, its whole check or replay in one worker process
  (the parent's side; ``in_worker``, the one helper for contained work); ``contain_worker``: that worker
  process, which runs the verb's job (a check's ``crosscheck._engine.execute:job``, a replay's
  ``crosscheck._replay.replay:job``) and sends back what it returns.

Arrays cross as data (a JSON header and each array's bytes; a result through ``crosscheck._report.wire``),
never as a pickle: a worker runs code from elsewhere, so what it sends back is data, never code.
"""
