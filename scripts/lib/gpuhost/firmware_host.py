"""Host side of the firmware checks (scripts/firmware-test, docs/firmware-tests.md): started before
QEMU, which boots OVMF with -vga none and our GPU; it watches QMP, the serial console, the
backend's log and its stats endpoint, and prints one verdict line per check:

  FIRMWARE-RESULT <check> PASS|FAIL|XFAIL|XPASS <detail>

then "FIRMWARE-SUMMARY <n> passed, <m> failed". Exit 0 iff nothing FAILed or XPASSed.

Two boots. Boot 1: the firmware stage (below), then OVMF boots the Linux guest (-kernel), whose
`wddm-guest suite --only device_init` checks the device from the OS (its setup tests: the
locator known, CpuTranslatedAddress = the BAR address sysfs shows) and powers off; QEMU runs
with -action shutdown=pause, so the host then sends system_reset and cont. Boot 2: the firmware
stage again, then the Linux guest again (boot2:os_after_firmware), then QEMU is told to quit.

The firmware stage of a boot, every check named boot<N>:<check>:
  bar_learned       the backend logs "VRAM BAR mapped at guest-physical X" (a new line this boot)
  bars_assigned     QMP `info pci`: every BAR of the GPU function (and of the ivshmem function in
                    mode 1) has an address ("at 0x..."), none "not mapped", none at 0 (polled
                    until then: a reset clears the BARs and the firmware assigns them again)
  vram_bar_placed   the VRAM BAR (mode 1: function 1 BAR2; mode 2: function 0 BAR4) is a 64-bit
                    prefetchable BAR of the VRAM's size; a VRAM of 4 GiB or more lies above 4 GiB
  locator_matches   the address the backend last logged is the one `info pci` shows
  firmware_screen_drawn (mode 1) a screendump taken before the kernel's first console line is
                    not a single colour; mode 2 has no QEMU display connection
                    (vhost-user-test-device-pci), so there it is not a check (its log says so)
  firmware_drove_device the backend answered at least six control requests (what a drawn frame
                    needs: display info, create, attach, set scanout, transfer, flush) before the
                    kernel's first line, and refused none (counted from the start of this
                    boot's firmware stage). Expected to fail (XFAIL) in mode 2:
                    OVMF never starts vhost-user-test-device-pci (class 0x078000, not a
                    display), so there the device is first started by the OS's driver, which is
                    when the backend maps the VRAM and learns the BAR (bar_learned says which).
Expected failure (--expect-reset-crash, mode 2 on QEMU 11.1.3): QEMU segfaults at the first
device start after a reset once VRAM was mapped (docs/lifecycle.md), i.e. when the Linux
driver sets DRIVER_OK in boot 2 (OVMF does not start the device in mode 2). boot2:qemu_survives_reset is then XFAIL and boot 2's checks are folded into
it; if QEMU survives it is XPASS (the expectation is stale) and boot 2's checks count as usual.
A check never reached is a FAIL. Standard library only.
"""

import argparse
import json
import os
import re
import socket
import sys
import time

from . import display_pattern
from . import info_pci
from .hostlog import Log
from .qmp import Qmp, QemuGone, StepError
from .serial import ESCAPE_RE, LineTail
from .verdicts import print_results, verdict

BAR_MAPPED_RE = re.compile(r"VRAM BAR mapped at guest-physical (0x[0-9a-fA-F]+)")
# The kernel proper (its EFI stub's lines come while the firmware still owns the screen).
KERNEL_LINE_RE = re.compile(r"^\[ *\d+\.\d+\]|Linux version")
GUEST_TEST_RE = re.compile(r"^GUEST-TEST (\S+) (PASS|FAIL) ?(.*)")
GUEST_EXIT_RE = re.compile(r"^WDDM-GUEST-EXIT (\d+)")
FIRMWARE_CHECKS = ["bar_learned", "bars_assigned", "vram_bar_placed", "locator_matches",
                   "firmware_screen_drawn", "firmware_drove_device"]
# A frame the firmware drew: GET_DISPLAY_INFO, RESOURCE_CREATE_2D, ATTACH_BACKING, SET_SCANOUT,
# TRANSFER_TO_HOST_2D, RESOURCE_FLUSH.
MIN_FIRMWARE_REQUESTS = 6
GPU_SLOT = 4
# OVMF's boot logo has dozens of colours; a text screen (or a cursor) has two or three.
LOGO_COLOURS = 16
FOUR_GIB = 1 << 32


log = Log("FIRMWARE-HOST")


def parse_info_pci(text):
    """{(device, function): {bar: description}} from `info pci`."""
    return {key: info_pci.bars(block) for key, block in info_pci.functions(text).items()}


def stats_requests(path):
    """(requests, refused) from the backend's stats endpoint."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(b"json\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    stats = json.loads(data)
    return stats["requests"], stats["refused_requests"]


class FirmwareHost:
    def __init__(self, args):
        self.args = args
        self.results = {}  # name -> (verdict, detail)
        self.console = LineTail(args.console_log)
        self.backend = LineTail(args.backend_log)
        self.kernel_started = False
        self.guest_lines = []
        self.requests_before = (0, 0)
        self.requests_at_kernel = None
        self.qmp = Qmp(args.qmp, time.monotonic() + args.connect_timeout, log)

    def record(self, name, ok, detail, expected_failure=False):
        word = verdict(ok, expected_failure)
        self.results[name] = (word, detail)
        log(f"{name}: {word} {detail}")

    def poll_console(self):
        for raw in self.console.lines():
            line = ESCAPE_RE.sub("", raw).strip()
            if KERNEL_LINE_RE.search(line) and not self.kernel_started:
                self.kernel_started = True
                # What the firmware did ends here.
                self.requests_at_kernel = stats_requests(self.args.stats)
            self.guest_lines.append(line)

    def wait_for(self, what, deadline, probe):
        """Polls probe() (and the console, and QMP events) until it returns a value."""
        while True:
            self.poll_console()
            self.qmp.poll_events()
            got = probe()
            if got is not None:
                return got
            if time.monotonic() > deadline:
                raise StepError(f"{what}: not within {self.args.boot_timeout:.0f}s")
            time.sleep(0.2)

    def new_bar_address(self):
        for line in self.backend.lines():
            m = BAR_MAPPED_RE.search(line)
            if m:
                return int(m.group(1), 16)
        return None

    def latest_bar_address(self, learned):
        """The last address the backend logged since `learned` was read (or `learned`)."""
        while (newer := self.new_bar_address()) is not None:
            learned = newer
        return learned

    def vram_bar_key(self):
        return (1, 2) if self.args.mode == "ivshmem" else (0, 4)

    def pci_bars(self):
        """QMP info pci: (functions, problems, assigned) for the GPU's slot."""
        text = self.qmp.hmp("info pci")
        functions = parse_info_pci(text)
        wanted = [0, 1] if self.args.mode == "ivshmem" else [0]
        problems, assigned = [], []
        for function in wanted:
            bars = functions.get((GPU_SLOT, function))
            if not bars:
                problems.append(f"00:{GPU_SLOT:02x}.{function} missing or without BARs")
                continue
            for bar, description in sorted(bars.items()):
                where = info_pci.assigned_range(description)
                name = f"{GPU_SLOT:02x}.{function} BAR{bar}"
                if where is None:
                    problems.append(f"{name}: {description}")
                else:
                    assigned.append(f"{name}={where[0]:#x}")
        return functions, problems, assigned

    def check_pci(self, prefix, learned, deadline):
        # A reset clears the BARs; the firmware assigns them again while it enumerates PCI.
        def all_assigned():
            got = self.pci_bars()
            return got if not got[1] else None
        try:
            functions, problems, assigned = self.wait_for("every BAR assigned", deadline,
                                                          all_assigned)
        except StepError:
            functions, problems, assigned = self.pci_bars()
        # The backend's latest view: a memory-table change after the first line may move it.
        learned = self.latest_bar_address(learned)
        self.record(prefix + "bars_assigned", not problems,
                    "; ".join(problems) if problems else " ".join(assigned))

        function, bar = self.vram_bar_key()
        description = functions.get((GPU_SLOT, function), {}).get(bar, "absent")
        where = info_pci.bar_range(description)
        name = f"{GPU_SLOT:02x}.{function} BAR{bar}"
        if where is None:
            self.record(prefix + "vram_bar_placed", False, f"{name}: {description}")
            self.record(prefix + "locator_matches", False, f"{name} has no address")
            return
        start, size = where
        problems = []
        if "64 bit prefetchable" not in description:
            problems.append("not a 64-bit prefetchable BAR")
        if size != self.args.vram_size:
            problems.append(f"size {size:#x}, the VRAM is {self.args.vram_size:#x}")
        if self.args.vram_size >= FOUR_GIB and start < FOUR_GIB:
            problems.append("below 4 GiB")
        side = "above" if start >= FOUR_GIB else "below"
        self.record(prefix + "vram_bar_placed", not problems,
                    f"{name} at {start:#x} ({side} 4 GiB), {size >> 20} MiB, 64-bit prefetchable"
                    + (": " + "; ".join(problems) if problems else ""))
        self.record(prefix + "locator_matches", learned == start,
                    f"backend learned {learned:#x}, info pci {start:#x}")

    def check_screen(self, prefix, deadline):
        """Screendumps until one shows the firmware's logo (LOGO_COLOURS), or until the kernel's
        first line: the verdict is then on the richest one taken before it (a single colour
        fails)."""
        name = prefix + "firmware_screen_drawn"
        if self.args.mode != "ivshmem":
            log(f"{name}: not checked: vhost-user-test-device-pci has no QEMU display "
                "connection (mode 2)")
            return
        path = os.path.join(self.args.out_dir, f"{prefix.rstrip(':')}-firmware.ppm")
        best, best_detail, shots = 0, "no screendump taken", 0
        while time.monotonic() < deadline:
            try:
                self.qmp.execute("screendump", arguments={"filename": path, "format": "ppm"})
                colours, detail = display_pattern.colour_count(path)
            except (StepError, OSError, display_pattern.PpmError) as err:
                colours, detail = 0, str(err)
            self.poll_console()
            if self.kernel_started:
                break
            shots += 1
            if colours > best or best == 0:
                best, best_detail = colours, detail
                os.replace(path, path.replace(".ppm", "-best.ppm"))
            if best >= LOGO_COLOURS:
                break
            time.sleep(0.5)
        self.record(name, best > 1,
                    f"{best_detail} ({shots} screendump(s) before the kernel's first line)")

    def check_requests(self, prefix, deadline):
        """The control requests answered before the kernel's first line. Mode 2 is expected to
        see none: OVMF never starts vhost-user-test-device-pci (its class is communication/other,
        not display, so the firmware's boot manager connects no driver to it)."""
        def enough():
            if self.kernel_started:
                return self.requests_at_kernel
            got = stats_requests(self.args.stats)
            return got if got[0] - self.requests_before[0] >= MIN_FIRMWARE_REQUESTS else None
        try:
            requests, refused = self.wait_for("firmware control requests", deadline, enough)
        except StepError:
            requests, refused = stats_requests(self.args.stats)
        new = requests - self.requests_before[0]
        new_refused = refused - self.requests_before[1]
        self.requests_before = (requests, refused)
        ok = new >= MIN_FIRMWARE_REQUESTS and new_refused == 0
        detail = f"{new} control requests answered before the kernel, {new_refused} refused"
        if self.args.mode != "ivshmem":
            detail += ("; expected none: OVMF does not start vhost-user-test-device-pci "
                       "(class 0x078000, not a display)")
        self.record(prefix + "firmware_drove_device", ok, detail,
                    expected_failure=self.args.mode != "ivshmem")

    def firmware_stage(self, boot):
        prefix = f"boot{boot}:"
        deadline = time.monotonic() + self.args.boot_timeout
        self.kernel_started = False
        self.requests_at_kernel = None
        # Only this boot's requests count (boot 1's OS made some before the reset).
        self.requests_before = stats_requests(self.args.stats)
        try:
            learned = self.wait_for("VRAM BAR mapped", deadline, self.new_bar_address)
        except StepError as err:
            self.record(prefix + "bar_learned", False, str(err))
            return
        stage = "after the kernel's first line" if self.kernel_started \
            else "before the kernel's first line"
        self.record(prefix + "bar_learned", True,
                    f"backend: VRAM BAR mapped at {learned:#x}, logged {stage}")
        self.check_screen(prefix, deadline)
        self.check_requests(prefix, deadline)
        self.check_pci(prefix, learned, deadline)

    def os_stage(self, boot):
        """The boot goes on into Linux: its setup tests, then its poweroff (a pause)."""
        deadline = time.monotonic() + self.args.boot_timeout

        def exited():
            for line in self.guest_lines:
                m = GUEST_EXIT_RE.match(line)
                if m:
                    return int(m.group(1))
            return None
        name = f"boot{boot}:os_after_firmware"
        try:
            code = self.wait_for("the guest's WDDM-GUEST-EXIT", deadline, exited)
        except StepError as err:
            self.record(name, False, str(err))
            return False
        tests = [GUEST_TEST_RE.match(line) for line in self.guest_lines]
        tests = [m for m in tests if m]
        failed = [f"{m.group(1)}: {m.group(3)}" for m in tests if m.group(2) != "PASS"]
        wait = next((line for line in self.guest_lines if line.startswith("VRAM BAR wait:")), "")
        ok = code == 0 and tests and not failed
        self.record(name, ok, f"exit {code}; {len(tests)} GUEST-TEST lines"
                    + (f"; failed: {'; '.join(failed)}" if failed else f"; {wait}"))
        self.wait_for("the guest's poweroff (a pause)", deadline,
                      lambda: True if any(e["event"] == "STOP" for e in self.qmp.events) else None)
        return True

    def run(self):
        self.firmware_stage(1)
        if not self.os_stage(1):
            return
        self.guest_lines.clear()
        self.qmp.events.clear()
        log("system_reset, cont: the second boot")
        self.qmp.execute("system_reset")
        self.qmp.execute("cont")
        try:
            self.firmware_stage(2)
            self.os_stage(2)
        except QemuGone:
            if not self.args.expect_reset_crash:
                raise
            self.record("boot2:qemu_survives_reset", False,
                        "QEMU ended during the second boot (the QEMU 11.1.3 reset defect, "
                        "docs/lifecycle.md); boot 2's checks are folded into this one",
                        expected_failure=True)
            return
        if self.args.expect_reset_crash:
            self.record("boot2:qemu_survives_reset", True,
                        "QEMU survived the second boot: the expected crash is gone",
                        expected_failure=True)
        self.qmp.execute("quit")

    def finish(self):
        boots = [1] if "boot2:qemu_survives_reset" in self.results and \
            self.results["boot2:qemu_survives_reset"][0] == "XFAIL" else [1, 2]
        checks = [c for c in FIRMWARE_CHECKS
                  if c != "firmware_screen_drawn" or self.args.mode == "ivshmem"]
        wanted = [f"boot{b}:{c}" for b in boots for c in checks + ["os_after_firmware"]]
        for name in wanted:
            if name not in self.results:
                self.record(name, False, "never reached")
        _, failed = print_results(
            "FIRMWARE-RESULT",
            [(name, word, detail) for name, (word, detail) in self.results.items()],
            "FIRMWARE-SUMMARY")
        return failed == 0


def main():
    p = argparse.ArgumentParser(
        prog="python3 -m gpuhost.firmware_host", description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["ivshmem", "shmem"], required=True)
    p.add_argument("--vram-size", type=int, required=True, help="bytes")
    p.add_argument("--qmp", required=True)
    p.add_argument("--console-log", required=True)
    p.add_argument("--backend-log", required=True)
    p.add_argument("--stats", required=True, help="the backend's stats socket")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--boot-timeout", type=float, default=90.0)
    p.add_argument("--connect-timeout", type=float, default=60.0)
    p.add_argument("--expect-reset-crash", action="store_true")
    args = p.parse_args()
    host = FirmwareHost(args)
    try:
        host.run()
    except QemuGone:
        log("QEMU went away")
    except (StepError, OSError, ValueError, KeyError) as err:
        log(f"error: {err}")
        try:
            host.qmp.execute("quit", timeout=5)
        except (StepError, QemuGone, OSError):
            pass
    return 0 if host.finish() else 1


if __name__ == "__main__":
    sys.exit(main())
