"""Reporting: the JSON contract, the terminal table, JUnit, plots, repro bundles, the environment."""
