"""Checks of a Windows VM that scripts/windows-vm started (no Windows needed: the firmware runs
on an empty disk), used by scripts/test. Over QMP: QEMU runs; `info pci` shows the GPU (1af4:1050,
id gpu0) with its BARs assigned and, in BAR mode ivshmem, the ivshmem function (1af4:1110) with its
BAR2; the e1000e and the boot VGA are there; `info tpm` shows the CRB TPM (Windows 11); COM1 is a
TCP server; -cpu has Windows 11's x86-64-v2 features; the backend's log shows QEMU connected and,
in mode ivshmem, the VRAM BAR the firmware enabled; the firmware's screen (a screendump of more
than a few colours: the OVMF logo) is on the boot VGA and, in mode ivshmem, on our GPU. Then QMP quit.

Prints one line per check, "WINVM-CHECK <name> PASS|FAIL <detail>"; exit 0 when all passed, 1
otherwise, 2 when QMP never answered. Standard library only.
"""

import argparse
import os
import re
import sys
import time

from . import display_pattern
from . import info_pci
from .hostlog import Log
from .qmp import Qmp, QemuGone, StepError
from .verdicts import result_line, verdict

log = Log("WINVM")

# Windows 11 24H2 needs x86-64-v2 (SSE4.2 and POPCNT among them).
# The firmware's screen (its logo, or its coloured text) has more than two colours; QEMU's
# placeholder text has two.
MIN_COLOURS = 2
WIN11_CPU_FEATURES = ["sse4.2", "popcnt", "cx16", "lahf-lm", "ssse3", "sse4.1"]


class Checker:
    def __init__(self, args):
        self.args = args
        self.failed = 0

    def record(self, name, ok, detail):
        print(result_line("WINVM-CHECK", name, verdict(ok), detail), flush=True)
        self.failed += 0 if ok else 1

    def wait_log(self, needle, deadline):
        """The first backend log line with needle, or None at the deadline."""
        while True:
            try:
                with open(self.args.backend_log, errors="replace") as f:
                    for line in f:
                        if needle in line:
                            return line.strip()
            except OSError:
                pass
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)

    def screen(self, qmp, device, deadline):
        """(ok, detail): screendumps of device until one shows the firmware's screen: more than
        MIN_COLOURS colours (the OVMF logo or coloured text), which QEMU's own two-colour text "Guest has not
        initialized the display (yet)" is not."""
        path = os.path.join(self.args.out_dir, f"{device}.ppm")
        while True:
            qmp.execute("screendump", arguments={"filename": path, "format": "ppm", "device": device})
            colours, detail = display_pattern.colour_count(path)
            if colours > MIN_COLOURS or time.monotonic() >= deadline:
                return colours > MIN_COLOURS, detail
            time.sleep(1)

    def check_pci(self, qmp, deadline):
        # The firmware assigns the BARs while it enumerates PCI: ask until it has (or time is up).
        gpu_bar = 4 if self.args.bar_mode == "shmem" else 1
        while True:
            blocks = info_pci.functions(qmp.hmp("info pci"))
            gpu = blocks.get((4, 0), "")
            gpu_bar_at = info_pci.bar_range(info_pci.bars(gpu).get(gpu_bar, ""))
            if gpu_bar_at or time.monotonic() >= deadline:
                break
            time.sleep(1)

        def function(dev, fn):
            return blocks.get((dev, fn), "")

        def prefetchable_bar(block, bar):
            """(start, size) of a 64-bit prefetchable BAR that is assigned, or None."""
            description = info_pci.bars(block).get(bar, "")
            if "64 bit prefetchable memory" not in description:
                return None
            return info_pci.bar_range(description)

        def bar_detail(bar, where, size):
            start, length = where
            return f"BAR{bar} {start:#x}..{start + length - 1:#x} ({size} bytes)"

        ok = "PCI device 1af4:1050" in gpu and 'id "gpu0"' in gpu and gpu_bar_at
        self.record("gpu_on_pci", bool(ok), " ".join(gpu.split())[:200] or "no function 00:04.0")
        if self.args.bar_mode == "shmem":
            where = prefetchable_bar(gpu, 4)
            size = where[1] if where else 0
            self.record("gpu_shmem_bar4_holds_vram", size >= self.args.vram_bytes,
                        bar_detail(4, where, size) if where else "no BAR4")
            self.record("no_ivshmem_function", function(4, 1) == "", "00:04.1 absent")
        else:
            ivs = function(4, 1)
            where = prefetchable_bar(ivs, 2)
            size = where[1] if where else 0
            ok = "PCI device 1af4:1110" in ivs and size == self.args.vram_bytes
            self.record("ivshmem_bar2_assigned", ok,
                        bar_detail(2, where, size) if where else "no BAR2 on 00:04.1")
        self.record("e1000e_on_pci", "PCI device 8086:10d3" in function(5, 0), "00:05.0 8086:10d3")
        self.record("boot_vga_on_pci", "PCI device 1234:1111" in function(1, 0), "00:01.0 1234:1111")

    def run(self):
        deadline = time.monotonic() + self.args.timeout
        try:
            qmp = Qmp(self.args.qmp, time.monotonic() + 30, log)
        except SystemExit:
            print("WINVM-CHECK qmp_answers FAIL no QMP", flush=True)
            return 2
        try:
            status = qmp.execute("query-status")
            self.record("qmp_answers", status.get("status") == "running", f"status {status.get('status')}")
            connected = "device reset (RESET_DEVICE)" if self.args.bar_mode == "ivshmem" \
                else "frontend asked for shared-memory regions"
            line = self.wait_log(connected, time.monotonic() + 30)
            self.record("backend_connected", line is not None, line or f"no '{connected}' in the backend log")
            if self.args.tpm:
                tpm = qmp.hmp("info tpm")
                self.record("tpm_crb_emulator", "tpm-crb" in tpm and "emulator" in tpm, " ".join(tpm.split()))
            chardev = qmp.hmp("info chardev")
            m = re.search(r"kdcom: filename=(\S+)", chardev)
            self.record("kd_serial_tcp_server", bool(m and "server=on" in m.group(1)),
                        m.group(1) if m else "no kdcom chardev")
            props = qmp.execute("query-cpu-model-expansion",
                                arguments={"type": "full", "model": {"name": self.args.cpu}})["model"]["props"]
            missing = [f for f in WIN11_CPU_FEATURES if props.get(f) is not True]
            self.record("cpu_has_win11_features", not missing,
                        f"-cpu {self.args.cpu}: " + (f"missing {missing}" if missing else "+".join(WIN11_CPU_FEATURES)))
            if self.args.bar_mode == "ivshmem":
                # OVMF enables the ivshmem function's memory decode: QEMU adds the BAR to the
                # memory table and the backend locates it.
                line = self.wait_log("VRAM BAR mapped at guest-physical", deadline)
                self.record("backend_sees_vram_bar", line is not None, line or "no VRAM BAR in the backend log")
            ok, detail = self.screen(qmp, "vga0", deadline)
            self.record("firmware_screen_on_boot_vga", ok, detail)
            if self.args.bar_mode == "ivshmem":
                ok, detail = self.screen(qmp, "gpu0", deadline)
                self.record("firmware_screen_on_gpu", ok, detail)
            self.check_pci(qmp, deadline)
            qmp.execute("quit")
        except (StepError, QemuGone, OSError, display_pattern.PpmError, KeyError) as err:
            self.record("qmp_session", False, f"{type(err).__name__}: {err}")
        return 0 if self.failed == 0 else 1


def main():
    p = argparse.ArgumentParser(
        prog="python3 -m gpuhost.windows_vm_check", description=__doc__.splitlines()[0])
    p.add_argument("--qmp", required=True)
    p.add_argument("--backend-log", required=True)
    p.add_argument("--bar-mode", choices=["ivshmem", "shmem"], required=True)
    p.add_argument("--vram-bytes", type=int, required=True)
    p.add_argument("--tpm", action="store_true")
    p.add_argument("--cpu", default="max")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--timeout", type=float, default=120)
    return Checker(p.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
