import contextlib
import io
import unittest
from unittest import mock

from gpuhost import firmware_host, info_pci

# QEMU 10's `info pci` for the GPU in BAR mode ivshmem (function 1 is the ivshmem VRAM BAR), an
# e1000e on a bridge's bus, and a BAR the firmware has not assigned yet.
INFO_PCI = """\
  Bus  0, device   0, function 0:
    Host bridge: PCI device 8086:29c0
      PCI subsystem 1af4:1100
      id ""
  Bus  0, device   4, function 0:
    Display controller: PCI device 1af4:1050
      PCI subsystem 1af4:1100
      IRQ 11, pin A
      BAR1: 32 bit memory at 0xc1040000 [0xc1040fff].
      BAR4: 64 bit prefetchable memory at 0x800000000 [0x800003fff].
      id "gpu0"
  Bus  0, device   4, function 1:
    RAM controller: PCI device 1af4:1110
      PCI subsystem 1af4:1100
      BAR2: 64 bit prefetchable memory at 0x400000000 [0x40fffffff].
      id "ivshmem"
  Bus  1, device   0, function 0:
    Ethernet controller: PCI device 8086:10d3
      BAR0: 32 bit memory at 0xffffffffffffffff [0x0001fffe].
      BAR2: I/O at 0xffffffffffffffff [0x001e].
      id "net0"
"""


class FunctionsTest(unittest.TestCase):
    def test_every_function_keyed_by_device_and_function(self):
        blocks = info_pci.functions(INFO_PCI)
        self.assertEqual(sorted(blocks), [(0, 0), (4, 0), (4, 1)])
        self.assertIn('id "gpu0"', blocks[(4, 0)])
        self.assertNotIn('id "ivshmem"', blocks[(4, 0)])
        self.assertIn("1af4:1110", blocks[(4, 1)])

    def test_another_bus_replaces_the_same_device_and_function(self):
        # Bus 1 device 0 function 0 has the key of bus 0's host bridge: the later block wins.
        self.assertIn("8086:10d3", info_pci.functions(INFO_PCI)[(0, 0)])

    def test_no_functions_in_other_text(self):
        self.assertEqual(info_pci.functions("no such command\n"), {})
        self.assertEqual(info_pci.functions(""), {})


class BarsTest(unittest.TestCase):
    def test_bars_of_a_block(self):
        bars = info_pci.bars(info_pci.functions(INFO_PCI)[(4, 0)])
        self.assertEqual(sorted(bars), [1, 4])
        self.assertEqual(bars[4], "64 bit prefetchable memory at 0x800000000 [0x800003fff].")

    def test_bar_range_of_an_assigned_bar(self):
        self.assertEqual(
            info_pci.bar_range("64 bit prefetchable memory at 0x400000000 [0x40fffffff]."),
            (0x400000000, 256 << 20))
        self.assertEqual(info_pci.bar_range("32 bit memory at 0xc1040000 [0xc1040fff]."),
                         (0xc1040000, 0x1000))

    def test_bar_range_of_no_address(self):
        self.assertIsNone(info_pci.bar_range("absent"))
        self.assertIsNone(info_pci.bar_range(""))

    def test_firmware_host_parse(self):
        parsed = firmware_host.parse_info_pci(INFO_PCI)
        self.assertEqual(sorted(parsed[(4, 1)]), [2])
        self.assertEqual(info_pci.bar_range(parsed[(4, 0)][1]), (0xc1040000, 0x1000))
        # An unassigned BAR parses too: its start is all ones, which the hosts refuse.
        start, _ = info_pci.bar_range(parsed[(0, 0)][0])
        self.assertEqual(start, 0xffffffffffffffff)


class AssignedTest(unittest.TestCase):
    def test_an_assigned_bar_has_its_range_and_an_unmapped_one_none(self):
        blocks = info_pci.functions(INFO_PCI)
        self.assertEqual(info_pci.assigned_range(info_pci.bars(blocks[(4, 1)])[2]),
                         (0x400000000, 0x10000000))
        # The e1000e's BAR0 (bus 1 replaced bus 0's device 0) is at QEMU's unmapped address.
        self.assertIsNone(info_pci.assigned_range(info_pci.bars(blocks[(0, 0)])[0]))
        self.assertIsNone(info_pci.assigned_range("64 bit memory at 0x0 [0xfff]."))
        self.assertIsNone(info_pci.assigned_range(""))

    def run_main(self, *argv):
        out = io.StringIO()
        with mock.patch("sys.stdin", io.StringIO(INFO_PCI)), contextlib.redirect_stdout(out):
            code = info_pci.main(list(argv))
        return code, out.getvalue()

    def test_the_command_prints_an_assigned_bar_and_fails_on_the_others(self):
        self.assertEqual(self.run_main("bar", "4", "0", "4"),
                         (0, "0x800000000 16384 64 bit prefetchable memory at 0x800000000 "
                             "[0x800003fff].\n"))
        self.assertEqual(self.run_main("bar", "4", "1", "4"), (1, ""))
        self.assertEqual(self.run_main("bar", "0", "0", "0"), (1, ""))
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(self.run_main("bar", "4"), (2, ""))


if __name__ == "__main__":
    unittest.main()