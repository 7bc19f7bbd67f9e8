"""A planted backend for sweep tests whose behaviour depends on the case's width ``d``.

d = 2: correct. d = 3: kills its process (``os._exit``, as a segfault would). d = 4: a real bug (a mean
instead of a sum). d = 5: hangs (waits 30 s on an event nobody sets; the sweep's timeout is shorter).
"""

from __future__ import annotations

import os
import threading

from planted import correct, mean_not_sum


def by_dim(weights, x):
    d = weights.shape[1]
    if d == 3:
        os._exit(3)
    if d == 4:
        return mean_not_sum(weights, x)
    if d == 5:
        threading.Event().wait(30)
    return correct(weights, x)
