"""Host side of the external-driver display tests (scripts/display-test): started before QEMU,
it answers the display guest (guest-tests/display/init.sh) on its second serial port, takes QMP
screendumps, collects the guest's checks and prints one verdict line per check:

  DISPLAY-RESULT <name> PASS|FAIL|XFAIL|XPASS <detail>

then "DISPLAY-SUMMARY <n> passed, <m> failed". Exit 0 iff nothing FAILed or XPASSed (an expected
failure that passes means the expectation is stale). Every check of the plan gets a line: one
the guest never reported is a FAIL ("never reported"), never a skip. With --backend ours the
host also reads the backend's stats endpoint at each boot's start and end
(display_socket_messages): the boot's large framebuffer transfers went to QEMU in streamed bands,
and the DRM client's cursor image, move and hide were written to QEMU's display socket. At
cursor-done it waits until the cursor hide is written before the guest draws the pattern again,
so the screendump at fb-redrawn covers messages that followed the cursor's on the socket.

Plans:
  linux-reboot  the Linux guest with the kernel's virtio_gpu; after its checks the host answers
                "reboot" (the guest's own `reboot -f`, which QEMU turns into a reset with -action
                reboot=reset) and the second boot runs every check again (after_reboot:*).
  ovmf          OVMF firmware, -vga none, the GPU the only display, holding the boot in its
                boot-option wait (-boot menu=on,splash-time: --firmware-hold seconds) after it
                drew its logo: the host takes screendumps from the start until one shows the
                firmware's frame (more colours than QEMU's two-colour placeholder text; before the
                guest's first sync point, so no Linux driver drew it), then releases the wait
                with Enter (OVMF's continue key, sent again each second until the guest's first
                sync point or the frame leaves the screen: a key that comes before OVMF's hotkey
                service runs is lost; extra ones reach no reader). The Linux guest
                the firmware then boots (a unified kernel image on a FAT disk) runs its checks
                once (ovmf:*) and powers off. See FirmwareWatch.

Expectations (--backend): the C peer (QEMU's vhost-user-gpu) does not come back after the
guest's reset (it is reported to die of SIGPIPE; QEMU 10.0.2's stays alive but asserts
'g->sock_fd == -1' at the second VHOST_USER_GPU_SET_SOCKET and no fence completes after), so with
c-peer reboot:second_init is expected to fail (XFAIL) and the after_reboot:* failures are folded
into it. A boot that does not reach its "done" point within --boot-timeout seconds ends the run
(QEMU is told to quit); its missing checks are FAILs. Standard library only.
"""

import argparse
import json
import os
import re
import select
import socket
import sys
import time

from . import display_pattern
from .hostlog import Log
from .qmp import Qmp, QemuGone, StepError, connect_unix, run_after_handshake
from .serial import LineTail, answer_sync, drain_sync, sync_point
from .verdicts import print_results, verdict

CHECK_RE = re.compile(r"DISPLAY-CHECK (\S+) (PASS|FAIL) ?(.*)")
FB_RE = re.compile(r"DISPLAY-FB (\d+)x(\d+)")
FIRMWARE_CHECK = "ovmf:firmware_screen_not_blank"

# What the guest reports on every boot (init.sh and display-check.c), and what the host adds.
GUEST_CHECKS = [
    "modules_loaded", "fb0_present", "drm_card0_present", "fb_pattern_drawn",
    "drm_open_card0", "virtgpu_resource_create", "virtgpu_create_fence_wait",
    "virtgpu_transfer_fence_wait", "kms_resources", "kms_connector_connected", "kms_modeset",
    "kms_page_flip_event", "kms_cursor", "fences_all_signalled", "fb_pattern_redrawn",
]
HOST_CHECKS = [
    "screendump_matches_pattern", "screendump_after_drm_matches_pattern", "dmesg_no_driver_errors",
]
BOOT_CHECKS = GUEST_CHECKS + HOST_CHECKS
# Checked in our backend's stats (the C peer has none): what it sent on QEMU's display socket
# during the boot.
OURS_CHECKS = ["display_socket_messages"]
# The counters the stats endpoint's "display" object holds (docs/measurement.md).
DISPLAY_COUNTERS = [
    "sockets", "scanouts", "updates", "update_bytes", "streamed_bands", "streamed_bytes",
    "cursor_images", "cursor_moves", "cursor_hides", "dropped_not_reading",
    "dropped_socket_closed",
]

# Kernel lines that mean the driver or the device went wrong.
DMESG_ERROR_RE = re.compile(
    r"error|fail|invalid|timed? ?out|bug|warn|oops|call trace|unknown", re.IGNORECASE)

# Checks expected to fail with a backend, and why.
EXPECTED_FAILURES = {
    "c-peer": {
        "reboot:second_init": "the C peer does not start again after the guest's reset",
    },
}


log = Log("DISPLAY-HOST")


class FirmwareWatch:
    """The ovmf plan's firmware check, fed with the colours of the screendumps the host takes
    while OVMF holds the boot, and with the guest's first sync point.

    No timing decides it. OVMF draws its logo, then waits up to `hold` seconds for a key before
    it boots (its boot-option wait, -boot menu=on,splash-time), so the frame stays on the screen
    until the host has seen it and sends Enter. A screendump with more colours than QEMU's own
    placeholder text, taken before the guest's first sync point, is the firmware's frame: the
    Linux driver is loaded only after the host answers that point. The check fails only if the
    kernel boots first: the wait ran out (the host did not look within `hold` seconds) or OVMF
    did not hold."""

    def __init__(self, hold, release_every=1.0):
        self.hold = hold
        self.release_every = release_every
        self.seen = None  # (seconds, detail) of the first screendump with the firmware's frame
        self.left = None  # seconds at which the frame had left the screen after it was seen
        self.last = "no screendump taken"  # the last screendump's detail
        self.looks = 0
        self.releases = []  # seconds at which Enter was sent
        self.booted = None  # seconds of the guest's first sync point

    def watching(self):
        """True while screendumps are still wanted: until the guest's first sync point, or the
        frame has come and gone (QEMU's built-in virtio-gpu shows its placeholder again when the
        firmware resets the GPU at ExitBootServices; vhost-user-gpu keeps the last frame)."""
        return self.booted is None and self.left is None

    def frame(self, at, colours, detail):
        """One screendump taken `at` seconds after start with `colours` colours. Returns True
        when the host should send Enter now."""
        self.looks += 1
        self.last = detail
        firmware = colours > display_pattern.PLACEHOLDER_COLOURS
        if self.seen is None:
            if not firmware:
                return False
            self.seen = (at, detail)
        elif not firmware:
            # The firmware reset the GPU when the kernel took over (ExitBootServices).
            self.left = at
            return False
        if self.releases and at - self.releases[-1] < self.release_every:
            return False
        self.releases.append(at)
        return True

    def boot(self, at):
        """The guest's first sync point, `at` seconds after start."""
        if self.booted is None:
            self.booted = at

    def result(self):
        """(ok, detail) of ovmf:firmware_screen_not_blank."""
        if self.seen is None:
            when = (f"the kernel booted ({self.booted:.1f} s)" if self.booted is not None
                    else "the run ended")
            return False, (f"{when} before a screendump showed the firmware's frame (more than "
                           f"{display_pattern.PLACEHOLDER_COLOURS} colours) in {self.looks} looks;"
                           f" the last: {self.last}. OVMF's boot-option wait ({self.hold:.0f} s)"
                           " ran out, or it did not hold")
        at, detail = self.seen
        parts = [detail, f"seen {at:.1f} s after start; OVMF holds the boot until Enter "
                 f"({self.hold:.0f} s at most)"]
        if self.releases:
            parts.append(f"Enter sent {len(self.releases)} time(s) from {self.releases[0]:.1f} s")
        if self.left is not None:
            parts.append(f"the frame left at {self.left:.1f} s")
        if self.booted is not None:
            parts.append(f"the kernel's first sync point at {self.booted:.1f} s")
        return True, "; ".join(parts)


def process_alive(pid):
    """True while pid runs (a zombie, dead but not yet reaped by its parent, is not alive)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class DisplayHost:
    def __init__(self, args):
        self.args = args
        self.results = {}  # name -> (ok, detail)
        self.boots = 0
        self.fb_size = None
        self.dmesg = []
        self.started = time.monotonic()
        self.firmware = FirmwareWatch(args.firmware_hold) if args.plan == "ovmf" else None
        self.boot_deadline = None
        self.display_before = None  # our backend's display counters at the boot's start
        self.console = LineTail(args.console_log)
        deadline = time.monotonic() + args.connect_timeout
        self.qmp = Qmp(args.qmp, deadline, log)
        self.sync = connect_unix(args.sync, deadline, "sync", log)
        self.sync.setblocking(False)

    def prefix(self):
        if self.args.plan == "ovmf":
            return "ovmf:"
        return "after_reboot:" if self.boots >= 2 else ""

    def boot_name(self):
        """The boot's name in the files kept: boot1, after_reboot or ovmf."""
        return self.prefix().rstrip(":") or "boot1"

    def record(self, name, ok, detail):
        self.results[name] = (ok, detail)
        log(f"{name}: {'PASS' if ok else 'FAIL'} {detail}")

    def answer(self, word):
        answer_sync(self.sync, word)

    def drain_sync(self):
        drain_sync(self.sync)

    def screendump(self, name):
        path = os.path.join(self.args.out_dir, f"{name}.ppm")
        if os.path.exists(path):
            os.unlink(path)
        self.qmp.sock.sendall(
            ('{"execute": "screendump", "arguments": {"filename": "%s", "format": "ppm"}}\n'
             % path).encode())
        deadline = time.monotonic() + 30
        while True:
            msg = self.qmp.read(max(deadline - time.monotonic(), 0))
            if msg is None:
                raise StepError("QMP screendump: no answer in 30s")
            if "error" in msg:
                raise StepError(f"QMP screendump failed: {msg['error'].get('desc')}")
            if "return" in msg:
                return path

    def look_at_firmware(self):
        """One screendump for FirmwareWatch; sends Enter when it says so. The first screendump
        with the firmware's frame is kept as firmware.ppm."""
        at = time.monotonic() - self.started
        try:
            path = self.screendump("firmware-look")
            colours, detail = display_pattern.colour_count(path)
        except (StepError, OSError, display_pattern.PpmError) as err:
            log(f"firmware screendump: {err}")
            return
        first = self.firmware.seen is None
        release = self.firmware.frame(at, colours, detail)
        if first and self.firmware.seen is not None:
            os.replace(path, os.path.join(self.args.out_dir, "firmware.ppm"))
            log(f"the firmware's frame: {detail}")
        if self.firmware.left is not None:
            log(f"the firmware's frame left the screen: {detail}")
        if release:
            try:
                self.qmp.execute("send-key",
                                 arguments={"keys": [{"type": "qcode", "data": "ret"}]})
                log("Enter sent: OVMF's boot-option wait ends")
            except StepError as err:
                # The wait then runs out by itself, --firmware-hold seconds late.
                log(f"Enter not sent: {err}")

    def on_fb_drawn(self, check, shot):
        prefix = self.prefix()
        name = prefix + check
        if self.fb_size is None:
            self.record(name, False, "the guest drew nothing (no DISPLAY-FB line)")
            return
        try:
            path = self.screendump(f"{self.boot_name()}-{shot}")
            ok, detail = display_pattern.compare(path, *self.fb_size)
            self.record(name, ok, detail)
        except (StepError, OSError, display_pattern.PpmError) as err:
            self.record(name, False, str(err))

    def stats_request(self, word):
        """One answer of our backend's stats endpoint (`json` or `table`); OSError if none."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(self.args.stats_socket)
            sock.sendall(word.encode() + b"\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return data

    def display_counters(self):
        """Our backend's display counters (a dict of numbers), or an error string."""
        try:
            counters = json.loads(self.stats_request("json"))["display"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            return f"stats endpoint {self.args.stats_socket}: {err}"
        if not isinstance(counters, dict) or not all(
                isinstance(counters.get(key), int) for key in DISPLAY_COUNTERS):
            return f"stats endpoint {self.args.stats_socket}: not display counters: {counters!r}"
        return counters

    def counters_since_boot(self):
        """This boot's display counters (after minus its start), or an error string."""
        before, after = self.display_before, self.display_counters()
        for counters in (before, after):
            if not isinstance(counters, dict):
                return counters or "no counters read at the boot's start"
        return {key: after[key] - before[key] for key in DISPLAY_COUNTERS}

    def wait_cursor_written(self):
        """Until our backend has written the DRM client's cursor hide (its last cursor message)
        to QEMU's socket, so that what the guest draws next follows it there."""
        deadline = time.monotonic() + 10
        while True:
            delta = self.counters_since_boot()
            if isinstance(delta, str) or delta["cursor_hides"] >= 1:
                break
            if time.monotonic() > deadline:
                log("cursor-done: no cursor hide written within 10 s")
                break
            time.sleep(0.05)
        log(f"cursor-done: {delta}")

    def check_display_counters(self):
        """What the boot's display work put on QEMU's socket: the pattern's large transfers
        streamed in bands, and the cursor's image, move and hide. (QEMU's screendump has no
        cursor: the pattern drawn after the cursor messages were written and screendumped shows
        that QEMU read them in step.)"""
        prefix = self.prefix()
        name = prefix + "display_socket_messages"
        try:
            # The whole stats table as the boot left it, for people (--keep DIR).
            table = os.path.join(self.args.out_dir, f"{self.boot_name()}-stats.txt")
            with open(table, "wb") as f:
                f.write(self.stats_request("table"))
        except OSError as err:
            log(f"stats table not kept: {err}")
        delta = self.counters_since_boot()
        if isinstance(delta, str):
            self.record(name, False, delta)
            return
        wanted = {"streamed_bands": 1, "cursor_images": 1, "cursor_moves": 1, "cursor_hides": 1}
        short = [key for key, least in wanted.items() if delta[key] < least]
        ok = not short and delta["dropped_not_reading"] == 0
        detail = (f"this boot: {delta['scanouts']} scanouts, {delta['updates']} updates "
                  f"({delta['update_bytes']} bytes), {delta['streamed_bands']} streamed bands "
                  f"({delta['streamed_bytes']} bytes), cursor images {delta['cursor_images']}, "
                  f"moves {delta['cursor_moves']}, hides {delta['cursor_hides']}, dropped "
                  f"{delta['dropped_not_reading']} (QEMU not reading), "
                  f"{delta['dropped_socket_closed']} (socket closed)")
        if short:
            detail += f"; none of: {', '.join(short)}"
        self.record(name, ok, detail)

    def on_done(self):
        prefix = self.prefix()
        dmesg_path = os.path.join(self.args.out_dir, f"{self.boot_name()}-dmesg.txt")
        with open(dmesg_path, "w") as f:
            f.write("\n".join(self.dmesg) + "\n")
        bad = [line for line in self.dmesg if DMESG_ERROR_RE.search(line)]
        detail = f"{len(self.dmesg)} lines kept in {os.path.basename(dmesg_path)}"
        if bad:
            detail += "; " + " | ".join(bad[:4])
        self.record(prefix + "dmesg_no_driver_errors", not bad and bool(self.dmesg), detail)
        self.dmesg = []

    def handle_sync(self, point):
        if point == "boot":
            self.boots += 1
            self.boot_deadline = time.monotonic() + self.args.boot_timeout
            self.fb_size = None
            if self.boots == 2 and self.args.plan == "linux-reboot":
                alive = process_alive(self.args.backend_pid)
                self.record("reboot:backend_survives", alive,
                            f"backend pid {self.args.backend_pid} "
                            + ("still running at the second boot" if alive else "has exited"))
            if self.args.backend == "ours":
                self.display_before = self.display_counters()
            if self.firmware is not None and self.firmware.booted is None:
                # The kernel runs: what the firmware showed is known now.
                self.firmware.boot(time.monotonic() - self.started)
                self.record(FIRMWARE_CHECK, *self.firmware.result())
            if self.boots > self.args.max_boots:
                log(f"boot #{self.boots}: more boots than the plan has; quitting QEMU")
                self.qmp.execute("quit")
                return
            self.answer("go")
        elif point == "fb-drawn":
            self.on_fb_drawn("screendump_matches_pattern", "pattern")
            self.answer("go")
        elif point == "cursor-done":
            if self.args.backend == "ours":
                self.wait_cursor_written()
            else:
                # The C peer has no counters: its cursor queue is given a moment.
                time.sleep(0.5)
            self.answer("go")
        elif point == "fb-redrawn":
            self.on_fb_drawn("screendump_after_drm_matches_pattern", "pattern-after-drm")
            self.answer("go")
        elif point == "done":
            self.boot_deadline = None
            self.on_done()
            if self.args.backend == "ours":
                self.check_display_counters()
            word = "reboot" if self.args.plan == "linux-reboot" and self.boots == 1 else "poweroff"
            log(f"boot {self.boots} done: answered {word}")
            self.answer(word)
        else:
            log(f"unknown point {point}: answered go")
            self.answer("go")

    def handle_line(self, line):
        point = sync_point(line)
        if point:
            self.handle_sync(point)
            return
        m = CHECK_RE.search(line)
        if m:
            self.record(self.prefix() + m.group(1), m.group(2) == "PASS", m.group(3).strip())
            return
        m = FB_RE.search(line)
        if m:
            self.fb_size = (int(m.group(1)), int(m.group(2)))
            return
        if line.startswith("DISPLAY-DMESG "):
            self.dmesg.append(line[len("DISPLAY-DMESG "):])

    def run(self):
        deadline = time.monotonic() + self.args.timeout
        next_look = time.monotonic()
        try:
            while time.monotonic() < deadline:
                for line in self.console.lines():
                    self.handle_line(line)
                if (self.firmware is not None and self.firmware.watching()
                        and time.monotonic() >= next_look):
                    next_look = time.monotonic() + self.args.firmware_look
                    self.look_at_firmware()
                if self.boot_deadline is not None and time.monotonic() > self.boot_deadline:
                    log(f"boot {self.boots} did not finish within {self.args.boot_timeout:.0f}s:"
                        " quitting QEMU")
                    if self.boots == 1:
                        self.results["run_completed"] = (
                            False, f"boot 1 did not finish within {self.args.boot_timeout:.0f}s")
                    self.boot_deadline = None
                    self.qmp.execute("quit", timeout=5)
                self.drain_sync()
                ready, _, _ = select.select([self.qmp], [], [], 0.1)
                if ready:
                    self.qmp.poll_events()
            log(f"QEMU still running after {self.args.timeout:.0f}s: quitting it")
            self.results.setdefault("run_completed", (False, f"timed out after {self.args.timeout:.0f}s"))
            try:
                self.qmp.execute("quit", timeout=5)
            except (StepError, QemuGone, OSError):
                pass
        except QemuGone:
            for line in self.console.lines():
                self.handle_line(line)
            log("QEMU exited")
        except StepError as err:
            self.results["run_completed"] = (False, str(err))
        return self.finish()

    def boot_checks(self):
        return BOOT_CHECKS + (OURS_CHECKS if self.args.backend == "ours" else [])

    def expected_names(self):
        checks = self.boot_checks()
        if self.args.plan == "ovmf":
            return [FIRMWARE_CHECK] + ["ovmf:" + c for c in checks]
        return (checks + ["reboot:backend_survives", "reboot:second_init"]
                + ["after_reboot:" + c for c in checks])

    def finish(self):
        if self.firmware is not None and FIRMWARE_CHECK not in self.results:
            self.record(FIRMWARE_CHECK, *self.firmware.result())
        if self.args.plan == "linux-reboot":
            second = ["after_reboot:" + c for c in self.boot_checks()]
            bad = [n for n in second if not self.results.get(n, (False, ""))[0]]
            self.results["reboot:second_init"] = (
                not bad and self.boots >= 2,
                f"second boot reached: {'yes' if self.boots >= 2 else 'no'}; "
                + (f"{len(bad)} of {len(second)} checks failed or missing: {', '.join(bad[:5])}"
                   if bad else f"all {len(second)} checks passed"))
            self.results.setdefault("reboot:backend_survives", (False, "no second boot"))
        expected = EXPECTED_FAILURES.get(self.args.backend, {})
        lines = []
        for name in self.expected_names() + [n for n in self.results if n == "run_completed"]:
            ok, detail = self.results.get(name, (False, "never reported"))
            if name in expected:
                word = verdict(ok, expected_failure=True)
                detail += f" (expected to fail: {expected[name]})"
            elif name.startswith("after_reboot:") and "reboot:second_init" in expected and not ok:
                # Folded into reboot:second_init, which is the expected failure.
                word = "XFAIL"
            else:
                word = verdict(ok)
            lines.append((name, word, detail))
        _, failed = print_results("DISPLAY-RESULT", lines, "DISPLAY-SUMMARY")
        return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(
        prog="python3 -m gpuhost.display_host", description=__doc__.split("\n\n")[0])
    ap.add_argument("--qmp", required=True)
    ap.add_argument("--sync", required=True)
    ap.add_argument("--console-log", required=True)
    ap.add_argument("--out-dir", required=True, help="where screendumps and dmesg lines are kept")
    ap.add_argument("--plan", required=True, choices=["linux-reboot", "ovmf"])
    ap.add_argument("--backend", required=True, choices=["ours", "c-peer"])
    ap.add_argument("--backend-pid", type=int, required=True)
    ap.add_argument("--stats-socket", help="our backend's stats endpoint (--backend ours)")
    ap.add_argument("--boot-timeout", type=float, default=45.0,
                    help="seconds from a boot's first sync point to its done point")
    ap.add_argument("--firmware-hold", type=float, default=60.0,
                    help="seconds OVMF's boot-option wait holds the boot (the QEMU line's "
                    "-boot splash-time), for the messages")
    ap.add_argument("--firmware-look", type=float, default=0.25,
                    help="seconds between the screendumps that look for the firmware's frame")
    ap.add_argument("--connect-timeout", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    args.max_boots = 2 if args.plan == "linux-reboot" else 1
    if args.backend == "ours" and not args.stats_socket:
        ap.error("--backend ours needs --stats-socket")
    return run_after_handshake(lambda: DisplayHost(args), log)


if __name__ == "__main__":
    sys.exit(main())
