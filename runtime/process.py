"""What every threaded process of the project (node agent, model webhook) does at start-up."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def start_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


def stop_on_signals() -> threading.Event:
    """An Event that SIGTERM (the kubelet stopping the pod) or SIGINT sets; the process stops on it."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
