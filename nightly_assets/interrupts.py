"""Cleanup that must finish: a second Ctrl-C or SIGTERM (or Dagster interrupting a step again)
while a rented machine is being deleted would leave it running and unpaid-for in our books."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from dagster._core.errors import DagsterExecutionInterruptedError


@contextlib.contextmanager
def deferred_interrupts(log: logging.Logger, what: str, reraise: bool = True) -> Iterator[list[int]]:
    """Inside the block SIGINT and SIGTERM are noted, not raised; after it, the first one noted
    raises KeyboardInterrupt (unless an exception is already on its way out, or `reraise` is off:
    then the caller reads the yielded list of signals noted and raises when its own cleanup is
    done). In the main thread the signals are caught; in a step thread of `nightly run` the
    interrupt `interrupt_thread` would raise is held back, and raised after the block as
    DagsterExecutionInterruptedError."""
    received: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    ident = threading.get_ident()
    previous = {}
    if main:

        def note(signum: int, _frame: FrameType | None) -> None:
            received.append(signum)
            log.warning("%s received while %s: finishing that first", signal.Signals(signum).name, what)

        previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    else:
        # A stage in a thread (`nightly run`, night_threads.py) is interrupted by `interrupt_thread`,
        # which holds the interrupt back while the thread is in here.
        with _DEFERRING_LOCK:
            _DEFERRING[ident] = received
    failed = False
    try:
        yield received
    except BaseException:
        failed = True
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with _DEFERRING_LOCK:
            _DEFERRING.pop(ident, None)
        if received and reraise and not failed:
            interrupted = KeyboardInterrupt if main else DagsterExecutionInterruptedError
            raise interrupted(f"interrupted while {what}")


# Threads inside `deferred_interrupts`, each with the list of interrupts held back for it.
_DEFERRING: dict[int, list[int]] = {}
_DEFERRING_LOCK = threading.Lock()


def deferring_threads() -> set[int]:
    """The idents of the threads inside `deferred_interrupts` now."""
    with _DEFERRING_LOCK:
        return set(_DEFERRING)


def interrupt_thread(thread: threading.Thread) -> None:
    """Raise DagsterExecutionInterruptedError in `thread` (when it next runs Python), or, while it
    is finishing cleanup that must finish (`deferred_interrupts`), when that cleanup is done."""
    if thread.ident is None or not thread.is_alive():
        return
    with _DEFERRING_LOCK:
        held = _DEFERRING.get(thread.ident)
        if held is not None:
            held.append(signal.SIGINT)
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(DagsterExecutionInterruptedError)
        )
