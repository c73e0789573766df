"""The log lines the host programs write to stderr: "<PREFIX> [  12.3s] message", seconds since
the program started. Standard library only."""

import sys
import time

START = time.monotonic()


class Log:
    """A callable logger: log("message") and log.error("message")."""

    def __init__(self, prefix):
        self.prefix = prefix

    def __call__(self, msg):
        print(f"{self.prefix} [{time.monotonic() - START:6.1f}s] {msg}", file=sys.stderr,
              flush=True)

    def error(self, msg):
        """An error before the program could start its work: "<PREFIX> error: message"."""
        print(f"{self.prefix} error: {msg}", file=sys.stderr, flush=True)
