import contextlib
import io
import json
import os
import socket
import tempfile
import threading
import time
import unittest

from gpuhost import hostlog, qmp

GREETING = {"QMP": {"version": {"qemu": {"major": 10, "minor": 0, "micro": 2}},
                    "capabilities": []}}


class FakeQemu(threading.Thread):
    """A QMP server on a Unix socket: the greeting, then one scripted reply list per command."""

    def __init__(self, path, replies):
        super().__init__(daemon=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.replies = replies
        self.commands = []

    def run(self):
        conn, _ = self.listener.accept()
        with conn, conn.makefile("rwb") as f:
            f.write(json.dumps(GREETING).encode() + b"\n")
            f.flush()
            for line in f:
                request = json.loads(line)
                self.commands.append(request)
                for reply in self.replies.get(request["execute"], [{"return": {}}]):
                    f.write(json.dumps(reply).encode() + b"\n")
                f.flush()
                if request["execute"] == "quit":
                    break
        self.listener.close()


class QmpTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "qmp.sock")
        self.err = io.StringIO()
        stderr = contextlib.redirect_stderr(self.err)
        stderr.__enter__()
        self.addCleanup(stderr.__exit__, None, None, None)

    def client(self, replies):
        self.qemu = FakeQemu(self.path, replies)
        self.qemu.start()
        return qmp.Qmp(self.path, time.monotonic() + 5, hostlog.Log("TEST"))

    def test_handshake_commands_and_events(self):
        client = self.client({
            "query-status": [{"event": "STOP", "data": {}}, {"return": {"running": False}}],
            "human-monitor-command": [{"return": "  Bus  0, device   4, function 0:\n"}],
            "quit": [{"return": {}}, {"event": "SHUTDOWN", "data": {"guest": False}}],
        })
        self.assertIn("TEST [", self.err.getvalue())
        self.assertIn("QMP connected (QEMU 10.0.2)", self.err.getvalue())
        self.assertEqual(client.execute("query-status"), {"running": False})
        self.assertEqual([e["event"] for e in client.events], ["STOP"])
        self.assertIn("device   4", client.hmp("info pci"))
        client.execute("quit")
        with self.assertRaises(qmp.QemuGone):
            while True:
                client.poll_events()
                client.read(1)
        self.assertEqual([e["event"] for e in client.events], ["STOP", "SHUTDOWN"])
        self.assertEqual([c["execute"] for c in self.qemu.commands],
                         ["qmp_capabilities", "query-status", "human-monitor-command", "quit"])
        self.assertEqual(self.qemu.commands[2]["arguments"], {"command-line": "info pci"})

    def test_an_error_is_a_step_error(self):
        client = self.client({"screendump": [
            {"error": {"class": "GenericError", "desc": "no such device"}}]})
        with self.assertRaises(qmp.StepError) as raised:
            client.execute("screendump", arguments={"filename": "x.ppm"})
        self.assertEqual(str(raised.exception),
                         "QMP screendump failed: GenericError: no such device")
        client.sock.close()

    def test_no_socket_in_time(self):
        with self.assertRaises(SystemExit) as raised:
            qmp.connect_unix(self.path, time.monotonic() + 0.2, "sync", hostlog.Log("TEST"))
        self.assertEqual(raised.exception.code, 2)
        self.assertIn(f"TEST error: the sync socket {self.path} did not accept a connection",
                      self.err.getvalue())

    def test_run_after_handshake(self):
        class Controller:
            def run(self):
                return 0

        def gone():
            raise qmp.QemuGone()

        log = hostlog.Log("TEST")
        self.assertEqual(qmp.run_after_handshake(Controller, log), 0)
        self.assertNotIn("error", self.err.getvalue())
        self.assertEqual(qmp.run_after_handshake(gone, log), 2)
        self.assertIn("TEST error: QEMU closed QMP during the handshake", self.err.getvalue())


if __name__ == "__main__":
    unittest.main()
