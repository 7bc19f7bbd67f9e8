"""A model checked block by block (``crosscheck.Blocks``): the declaration (``declare``), the recording
of each block's inputs and cotangents (``record``) and the proof that a block rebuilt alone is the
model's (``proof``). The check and its Dask tasks run in the sweep (``crosscheck._sweep.blocks``), above
the engine they call."""
