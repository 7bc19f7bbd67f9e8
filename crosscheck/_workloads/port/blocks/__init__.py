"""A model checked block by block (``crosscheck.Blocks``): the declaration (``declare``) and the
recording of each block's inputs and cotangents (``record``). The check and its Dask tasks run in the
sweep (``crosscheck._sweep.blocks``), above the engine they call."""
