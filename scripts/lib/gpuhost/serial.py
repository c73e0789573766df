"""The guest's serial lines as the host programs see them: the console (ttyS0, QEMU's log file,
tailed as it grows) and the sync channel (ttyS1, a socket): the guest prints
"GUEST-SYNC <point>" on its console, then blocks reading one line from ttyS1, which the host
answers with one word. Standard library only."""

import os
import re

SYNC_RE = re.compile(r"GUEST-SYNC ([A-Za-z0-9_.-]+)")
ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def sync_point(line):
    """The point of a "GUEST-SYNC <point>" line, or None."""
    m = SYNC_RE.search(line)
    return m.group(1) if m else None


def clean_line(raw):
    """A console line without terminal escapes or a trailing carriage return."""
    return ESCAPE_RE.sub("", raw).rstrip("\r")


class LineTail:
    """New complete lines of a growing file (a log written by another process)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.partial = b""

    def skip_to_end(self):
        """Forget everything written so far: later lines only."""
        self.lines()
        self.partial = b""

    def lines(self):
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # truncated: the writer started over
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        return [clean_line(line.decode("utf-8", "replace")) for line in complete]


def answer_sync(sock, word):
    """Sends the guest its one-word answer on the (non-blocking) sync channel."""
    sock.setblocking(True)
    try:
        sock.sendall(word.encode() + b"\n")
    finally:
        sock.setblocking(False)


def drain_sync(sock):
    """The guest's tty may echo our answers back: read and drop them."""
    try:
        while sock.recv(4096):
            pass
    except OSError:
        pass
