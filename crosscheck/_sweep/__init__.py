"""Sweeps: a matrix of cases from ``[tool.crosscheck]`` or the CI matrix, on processes or Dask."""
