"""A QMP client (QEMU's JSON monitor over a Unix socket) for the host programs. Standard library
only."""

import json
import os
import select
import socket
import time

from .hostlog import Log


class QemuGone(Exception):
    """QEMU closed the QMP socket: it has exited."""


class StepError(Exception):
    """A step failed (timeout, QMP error); the message says which."""


def connect_unix(path, deadline, what, log=None):
    """Connect to the Unix socket at path, retrying until QEMU has created it; SystemExit(2)
    (after an error line) when it accepts no connection before the deadline."""
    last = None
    while time.monotonic() < deadline:
        if os.path.exists(path):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                return sock
            except OSError as err:
                last = err
                sock.close()
        time.sleep(0.1)
    (log or Log("QMP")).error(f"the {what} socket {path} did not accept a connection in time"
                              f" ({last or 'it never appeared'})")
    raise SystemExit(2)


def run_after_handshake(make, log):
    """A host program's exit status: make() builds its controller (which connects to QEMU's
    sockets and QMP), then its run() answers; 2, after an error line, when QEMU closed QMP during
    the handshake."""
    try:
        controller = make()
    except QemuGone:
        log.error("QEMU closed QMP during the handshake")
        return 2
    return controller.run()


class Qmp:
    """A QMP client: one JSON object per line; events are kept (in .events), not returned.
    log: a hostlog.Log for the connection and the events."""

    def __init__(self, path, deadline, log=None):
        self.log = log or Log("QMP")
        self.sock = connect_unix(path, deadline, "QMP", self.log)
        self.buf = b""
        self.events = []
        greeting = self.read(max(deadline - time.monotonic(), 10))
        if greeting is None or "QMP" not in greeting:
            self.log.error(f"no QMP greeting on {path}: {greeting!r}")
            raise SystemExit(2)
        version = greeting["QMP"].get("version", {}).get("qemu", {})
        self.log("QMP connected (QEMU {}.{}.{})".format(
            version.get("major", "?"), version.get("minor", "?"), version.get("micro", "?")))
        self.execute("qmp_capabilities")

    def fileno(self):
        return self.sock.fileno()

    def read(self, timeout):
        """The next message, None on timeout; raises QemuGone at EOF."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = max(deadline - time.monotonic(), 0)
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                raise QemuGone()
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def poll_events(self):
        """Read the events that have arrived, without waiting; raises QemuGone at EOF."""
        while True:
            msg = self.read(0)
            if msg is None:
                return
            self._event(msg)

    def _event(self, msg):
        if "event" in msg:
            self.events.append(msg)
            self.log(f"QMP event {msg['event']} {json.dumps(msg.get('data', {}))}")

    def execute(self, command, timeout=30.0, arguments=None):
        """Run a command; return its "return" value; StepError on an error or a timeout."""
        request = {"execute": command}
        if arguments is not None:
            request["arguments"] = arguments
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            msg = self.read(max(deadline - time.monotonic(), 0))
            if msg is None:
                raise StepError(f"QMP {command}: no answer in {timeout:.0f}s")
            if "return" in msg:
                return msg["return"]
            if "error" in msg:
                err = msg["error"]
                raise StepError(f"QMP {command} failed: {err.get('class')}: {err.get('desc')}")
            self._event(msg)

    def hmp(self, command_line, timeout=30.0):
        """A human-monitor command (e.g. "info pci") through QMP; its text."""
        return self.execute("human-monitor-command", timeout=timeout,
                            arguments={"command-line": command_line})
