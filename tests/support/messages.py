"""A message as a worker process receives it: sent on one end of a pipe, received on the other."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from typing import Any

from crosscheck._engine.process.isolate_worker import receive, send


def crossed(message: Any) -> Any:
    """``message`` after ``send`` and ``receive`` (the receiving end on a thread: a large message does
    not fit the pipe's buffer)."""
    here, there = Pipe()
    got: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: got.update(back=receive(there)))
    reader.start()
    try:
        send(here, message)
    finally:
        reader.join()
        here.close()
        there.close()
    return got["back"]
