"""The tests' helpers, in one place: planted bugs, hostile backends, misbehaving user code, exact answers,
small models and subprocess helpers. ``conftest.py`` puts this folder on ``sys.path``: tests import
them by name (``import planted``) and import strings name them the same way (``planted:no_last_relu``).
"""
