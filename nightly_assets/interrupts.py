"""Cleanup that must finish: a second Ctrl-C or SIGTERM (or Dagster interrupting a step again)
while a rented machine is being deleted would leave it running and unpaid-for in our books."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def deferred_interrupts(log: logging.Logger, what: str, reraise: bool = True) -> Iterator[list[int]]:
    """Inside the block SIGINT and SIGTERM are noted, not raised; after it, the first one noted
    raises KeyboardInterrupt (unless an exception is already on its way out, or `reraise` is off:
    then the caller reads the yielded list of signals noted and raises when its own cleanup is
    done). Only the main thread can do this; elsewhere the block runs as is."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def note(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        log.warning("%s received while %s: finishing that first", signal.Signals(signum).name, what)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    failed = False
    try:
        yield received
    except BaseException:
        failed = True
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received and reraise and not failed:
            raise KeyboardInterrupt(f"interrupted while {what}")
