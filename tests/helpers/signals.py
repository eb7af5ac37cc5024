"""Child processes that a test interrupts with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """`preexec_fn` for a child a test sends SIGINT: its SIGINT back to the default action, so
    Python turns it into KeyboardInterrupt. A test suite started in the background by a script
    (`cmd &` without job control) inherits SIGINT ignored, and Python keeps an ignored SIGINT
    ignored: the child would never see the Ctrl-C the test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
