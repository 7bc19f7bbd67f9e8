"""``crosscheck replay``, a verb of its own beside the sweep: run a repro bundle's backends again and say
whether each reproduces bit for bit.

- ``replay``: the verb (``replay(bundle, ...)``, its record ``Replay``, the verdict); it runs the replay
  here, or, for a trusted workload given as an import string, in one worker process (the engine's
  helper for contained work, ``_engine/process/contain.in_worker``).
- ``rerun``: the replay in this process, a row per backend (what is trusted, each backend loaded and
  called again through the guarded call, compared with its saved value).
- ``case``: the bundle's arrays must be the case it claims, and the case must fit in memory, before
  anything runs on them.
"""
