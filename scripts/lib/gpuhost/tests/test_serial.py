import os
import socket
import tempfile
import unittest

from gpuhost import serial


class LineTest(unittest.TestCase):
    def test_sync_point(self):
        self.assertEqual(serial.sync_point("GUEST-SYNC paused-after-map"), "paused-after-map")
        self.assertEqual(serial.sync_point("\x1b[0mGUEST-SYNC scanout-a\r"), "scanout-a")
        self.assertIsNone(serial.sync_point("GUEST-TEST boot PASS"))

    def test_clean_line(self):
        self.assertEqual(serial.clean_line("\x1b[2J\x1b[?25lBdsDxe: starting\r"),
                         "BdsDxe: starting")


class LineTailTest(unittest.TestCase):
    def setUp(self):
        fd, self.path = tempfile.mkstemp()
        os.close(fd)
        self.addCleanup(os.unlink, self.path)

    def write(self, data, mode="ab"):
        with open(self.path, mode) as f:
            f.write(data)

    def test_complete_lines_only_then_the_rest(self):
        tail = serial.LineTail(self.path)
        self.write(b"one\r\ntw")
        self.assertEqual(tail.lines(), ["one"])
        self.write(b"o\nthree\n")
        self.assertEqual(tail.lines(), ["two", "three"])
        self.assertEqual(tail.lines(), [])

    def test_skip_to_end(self):
        tail = serial.LineTail(self.path)
        self.write(b"old\npartial")
        tail.skip_to_end()
        self.write(b" rest\nnew\n")
        self.assertEqual(tail.lines(), [" rest", "new"])

    def test_a_truncated_file_starts_over(self):
        tail = serial.LineTail(self.path)
        self.write(b"first boot line\n")
        tail.lines()
        self.write(b"again\n", "wb")
        self.assertEqual(tail.lines(), ["again"])

    def test_a_missing_file_has_no_lines(self):
        self.assertEqual(serial.LineTail(self.path + ".none").lines(), [])


class SyncChannelTest(unittest.TestCase):
    def test_answer_and_drain(self):
        host, guest = socket.socketpair()
        self.addCleanup(host.close)
        self.addCleanup(guest.close)
        host.setblocking(False)
        serial.answer_sync(host, "after-reset")
        self.assertEqual(guest.recv(64), b"after-reset\n")
        guest.sendall(b"after-reset\n")  # the tty's echo
        serial.drain_sync(host)
        with self.assertRaises(BlockingIOError):
            host.recv(64)


if __name__ == "__main__":
    unittest.main()
