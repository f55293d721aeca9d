"""SIGINT/SIGTERM as a flag the training loop checks between updates."""

from __future__ import annotations

import contextlib
import signal
from typing import Any


class TrainingInterruptedError(RuntimeError):
    """Training stopped on SIGINT/SIGTERM after saving a checkpoint."""


class StopSignals:
    """Turns SIGINT/SIGTERM into a flag checked between updates (main thread only).

    A second signal raises ``KeyboardInterrupt`` at once; on exit the previous handlers return.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        with contextlib.suppress(ValueError):  # not in the main thread: no handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second signal: give up at once
            raise KeyboardInterrupt
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
