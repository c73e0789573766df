"""Host side of the guest's VM-lifecycle scenario (stop/cont and system_reset while the guest uses
the GPU). Started in the background before QEMU as `python3 -m gpuhost.vmctl` (scripts/lib/gpu.sh:
gpu_run_guest_vmctl); ends when QEMU does.

Protocol: the guest prints "GUEST-SYNC <point>" on its console (ttyS0, i.e. the QEMU log) and
then blocks reading one line from /dev/ttyS1, a second serial port whose host end is the socket
--sync; the host answers one word and a newline. Plan "lifecycle":

  boot              answer "first" the first time, "after-reset" after the host's system_reset
  paused-after-map  QMP stop; wait for a new backend log line with "device paused"; sleep 1 s;
  transfer-running  (transfer-running: that line must say "mid-submission"); QMP cont; wait for
                    a new line with "device resumed"; answer "go"
  reset-point       QMP system_reset; no answer (the guest reboots and prints "boot" again)
  anything else     answer "go", with a warning

Plan "pause-only" is the same up to reset-point, which it answers "no-reset" (the guest then
ends its run): for QEMU 11.1.3 with the shared-memory VRAM BAR, which segfaults at the first
device start after any reset once the VRAM was mapped (docs/lifecycle.md).

Plan "scanout" (the guest's `wddm-guest scanout`: a surface in VRAM on the scanout):

  scanout-a, scanout-b, scanout-a-again
                    QMP screendump of device gpu0 (PPM, kept in --out-dir); compare it pixel for pixel with
                    pattern a or b of 320x240 (display_pattern); answer "match", or
                    "mismatch" (a failure, with the first differing pixel in the log)
  scanout-stop-cont QMP stop; wait for the backend's "device paused"; screendump (pattern a);
                    QMP cont; wait for "device resumed"; screendump again (pattern a); answer
                    "match" or "mismatch"
  scanout-b-after-cont  a screendump as above (pattern b: the guest flipped after the resume)
  boot              as in plan lifecycle: "first", then "after-reset" after the host's reset
  scanout-reset     a screendump (pattern a), then QMP system_reset; no answer (the guest
                    reboots, the backend is reset, VRAM is kept)
  scanout-off-after-reset  after the guest started the device again, before it sets a scanout:
                    a screendump that must not be pattern a (the frame from before the reset);
                    answer "match" when it is not, "mismatch" when it still is
  scanout-a-after-reset  a screendump as above (pattern a, shown again from the kept VRAM)

At the boot after the reset, before the guest sets a scanout, a screendump is kept
(boot-after-reset.ppm) and its colours logged: what QEMU's console shows then.

Plan "tdr" (the guest's `wddm-guest tdr`: the driver's timeout detection and recovery against
the backend's fault injections, armed with `vhost-user-wddm-gpu ctl` on --ctl-socket, the
backend binary --backend-bin):

  tdr-<name>        `ctl disarm all`, then `ctl arm SPEC` for each SPEC of TDR_ARMS[point];
                    answer "armed", or "not-armed" (a failure) when a ctl call failed
  tdr-done          `ctl list` (printed whole into the log) and `ctl list --json`: every
                    injection armed must have fired at least once (a failure otherwise);
                    answer "go"

Plan "tdr-cdev" is plan tdr, then the C device library's suite in its tdr mode in the same
boot: ctdr-lost-interrupt and ctdr-hang armed as above, ctdr-done as tdr-done.

Each step is logged to stderr as one "VMCTL <point>: ..." line. Exit 0 when every step worked
and every point of the plan was seen; 1 otherwise (a timeout, a QMP error, a missing point, an
unexpected reboot); 2 for bad arguments or sockets that never appeared. Standard library only.
"""

import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

from . import display_pattern
from .hostlog import Log
from .qmp import Qmp, QemuGone, StepError, connect_unix, run_after_handshake
from .serial import LineTail, answer_sync, drain_sync, sync_point

PLAN_POINTS = {
    "lifecycle": ["boot", "paused-after-map", "transfer-running", "reset-point"],
    "pause-only": ["boot", "paused-after-map", "transfer-running", "reset-point"],
    "scanout": ["boot", "scanout-a", "scanout-b", "scanout-a-again", "scanout-stop-cont",
                "scanout-b-after-cont", "scanout-reset", "scanout-off-after-reset",
                "scanout-a-after-reset"],
}
# Plan tdr: what the host arms at each of the guest's points (scenario/tdr.rs says what the
# driver must then see; the durations are the guest's too).
TDR_ARMS = {
    "tdr-slow": ["slow 500ms"],
    "tdr-lost-interrupt": ["lost-interrupt"],
    "tdr-hang": ["hang"],
    "tdr-fault": ["fault packet=1 status=segment_range"],
    "tdr-slow-past-delay": ["slow 60s"],
    "tdr-preempt-refuse": ["slow 60s", "preempt-refuse"],
    "tdr-preempt-slow": ["slow 60s", "preempt-slow 1s"],
    # The virtual node (the scenario's VirtualTarget maps this VA; a GpuMmu layout).
    "tdr-virtual-hang": ["hang node=1"],
    "tdr-virtual-page-fault": ["page-fault va=0x18700000000 write"],
    "tdr-power-loss": ["power-loss"],
}
TDR_DONE = "tdr-done"
PLAN_POINTS["tdr"] = list(TDR_ARMS) + [TDR_DONE]
# The C device library's suite in its tdr mode, after the Rust scenario in the same boot (plan
# tdr-cdev; not with QEMU 11.1's shared-memory BAR, where the C suite gets no second start).
CDEV_TDR_ARMS = {
    "ctdr-lost-interrupt": ["lost-interrupt"],
    "ctdr-hang": ["hang"],
}
CDEV_TDR_DONE = "ctdr-done"
TDR_ARMS.update(CDEV_TDR_ARMS)
PLAN_POINTS["tdr-cdev"] = PLAN_POINTS["tdr"] + list(CDEV_TDR_ARMS) + [CDEV_TDR_DONE]
# Seconds one ctl call may take.
CTL_TIMEOUT = 10.0
ARMED_RE = re.compile(r"^armed injection (\d+): (.*)$")


def armed_id(stdout):
    """The id in ctl arm's answer ("armed injection 3: hang"), or None."""
    m = ARMED_RE.match(stdout.strip())
    return int(m.group(1)) if m else None


def unfired(listing, armed):
    """The (id, point, spec) of `armed` ({id: (point, spec)}) that `listing` (ctl list --json)
    shows no firing of."""
    fired = {f.get("id") for f in listing.get("fired", [])}
    return [(i, point, spec) for i, (point, spec) in sorted(armed.items()) if i not in fired]
# What each scanout point shows: the pattern variant, and the surface's size (scanout.rs).
SCANOUT_POINTS = {"scanout-a": "a", "scanout-b": "b", "scanout-a-again": "a",
                  "scanout-stop-cont": "a", "scanout-b-after-cont": "b", "scanout-reset": "a",
                  "scanout-a-after-reset": "a"}
SCANOUT_SIZE = (320, 240)

log = Log("VMCTL")


class Vmctl:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.seen = {}
        self.resets = 0
        self.armed = {}
        self.console = LineTail(args.console_log)
        self.backend = LineTail(args.backend_log)
        deadline = time.monotonic() + args.connect_timeout
        self.qmp = Qmp(args.qmp, deadline, log)
        self.sync = connect_unix(args.sync, deadline, "sync", log)
        self.sync.setblocking(False)
        log(f"sync channel connected ({args.sync})")

    def fail(self, point, msg):
        self.failures.append(f"{point}: {msg}")
        log(f"{point}: FAILED: {msg}")

    def answer(self, word):
        answer_sync(self.sync, word)

    def drain_sync(self):
        drain_sync(self.sync)

    def wait_backend(self, needle, timeout):
        """The first new backend log line containing needle; StepError after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.backend.lines():
                if needle in line:
                    return line.strip()
            if time.monotonic() >= deadline:
                raise StepError(f"no new backend log line with '{needle}' within {timeout:.0f}s")
            self.qmp.poll_events()
            time.sleep(0.05)

    def pause_resume(self, point, need_mid_submission):
        steps = []
        self.backend.skip_to_end()
        if need_mid_submission:
            # The guest posted a submission of some ten seconds and kicked; on a loaded host the
            # engine thread may not have taken it yet, and a stop then finds it queued, not
            # running. Half a second lets it start and leaves nearly all of it to pause.
            time.sleep(0.5)
        try:
            self.qmp.execute("stop")
            steps.append("stop ok")
            try:
                line = self.wait_backend("device paused", self.args.step_timeout)
                steps.append(f"backend paused ({line})")
                time.sleep(1.0)
                if need_mid_submission and "mid-submission" not in line:
                    self.fail(point, f"the pause line does not say mid-submission: {line}")
            except StepError as err:
                self.fail(point, str(err))
            status = self.qmp.execute("query-status")
            if status.get("running"):
                self.fail(point, f"QEMU runs after stop: {status}")
            self.backend.skip_to_end()
            self.qmp.execute("cont")
            steps.append("cont ok")
            try:
                line = self.wait_backend("device resumed", self.args.step_timeout)
                steps.append(f"resumed ({line})")
            except StepError as err:
                self.fail(point, str(err))
        except StepError as err:
            self.fail(point, str(err))
        self.answer("go")
        steps.append("answered go")
        log(f"{point}: " + ", ".join(steps))

    def screendump(self, name):
        """A screendump of the GPU's console into `name`.ppm in --out-dir; its path."""
        path = os.path.join(self.args.out_dir, f"{name}.ppm")
        if os.path.exists(path):
            os.unlink(path)
        # The GPU's console: the guest machine also has QEMU's default VGA (console 0).
        self.qmp.execute("screendump", arguments={
            "filename": path, "format": "ppm", "device": "gpu0", "head": 0})
        return path

    def judge_screen(self, name, judge):
        """Screendump `name`.ppm of the GPU's console judged by `judge(path)` -> (ok, detail):
        ok, the detail logged or recorded as a failure."""
        try:
            ok, detail = judge(self.screendump(name))
        except (StepError, OSError, display_pattern.PpmError) as err:
            ok, detail = False, str(err)
        if ok:
            log(f"{name}: {detail}")
        else:
            self.fail(name, detail)
        return ok

    def screen_matches(self, name, variant):
        """Screendump `name`.ppm compared with pattern `variant`."""
        return self.judge_screen(
            name, lambda path: display_pattern.compare(path, *SCANOUT_SIZE, variant))

    def screen_not_stale(self, point):
        """The screen must no longer be the surface shown before the reset; answers the guest."""
        def not_stale(path):
            stale, _ = display_pattern.compare(path, *SCANOUT_SIZE, "a")
            _, colours = display_pattern.colour_stats(path)
            note = "; still the frame from before the reset (pattern a)" if stale else ""
            return not stale, colours + note
        ok = self.judge_screen(point, not_stale)
        self.answer("match" if ok else "mismatch")

    def compare_screen(self, point):
        """Screendump, compared with the surface the guest shows at point; answers the guest."""
        ok = self.screen_matches(point, SCANOUT_POINTS[point])
        self.answer("match" if ok else "mismatch")

    def stop_cont_screens(self, point):
        """The screen while the VM is stopped and after it continues; answers the guest."""
        variant = SCANOUT_POINTS[point]
        ok = True
        self.backend.skip_to_end()
        try:
            self.qmp.execute("stop")
            log(f"{point}: stop ok, backend: {self.wait_backend('device paused', self.args.step_timeout)}")
            ok &= self.screen_matches(f"{point}-stopped", variant)
            self.backend.skip_to_end()
            self.qmp.execute("cont")
            log(f"{point}: cont ok, backend: {self.wait_backend('device resumed', self.args.step_timeout)}")
            ok &= self.screen_matches(f"{point}-after-cont", variant)
        except StepError as err:
            self.fail(point, str(err))
            ok = False
        self.answer("match" if ok else "mismatch")

    def reset_vm(self, point):
        """QMP system_reset; no answer: the guest reboots."""
        try:
            self.qmp.execute("system_reset")
            self.resets += 1
            log(f"{point}: system_reset ok (no answer; the guest reboots)")
        except StepError as err:
            self.fail(point, str(err))

    def screen_after_reset(self):
        """What QEMU's console shows at the boot after the reset, before the guest sets a
        scanout: kept and logged (not judged)."""
        try:
            path = self.screendump("boot-after-reset")
            _, detail = display_pattern.colour_stats(path)
            stale, _ = display_pattern.compare(path, *SCANOUT_SIZE, "a")
            log(f"boot after the reset, before any scanout: {detail}"
                f"{' (still pattern a)' if stale else ''}")
        except (StepError, OSError, display_pattern.PpmError) as err:
            log(f"boot after the reset: no screendump: {err}")

    def ctl(self, words):
        """`vhost-user-wddm-gpu ctl SOCKET words...`: its standard output; StepError when it
        fails or takes longer than CTL_TIMEOUT."""
        if not self.args.backend_bin or not self.args.ctl_socket:
            raise StepError("plan tdr needs --backend-bin and --ctl-socket")
        cmd = [self.args.backend_bin, "ctl", self.args.ctl_socket] + words.split()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=CTL_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise StepError(f"ctl {words}: {err}") from err
        if done.returncode != 0:
            raise StepError(f"ctl {words}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def tdr_arm(self, point):
        """Disarms what is left, arms the point's injections; answers armed or not-armed."""
        steps = []
        try:
            steps.append(self.ctl("disarm all").strip())
            for spec in TDR_ARMS[point]:
                out = self.ctl(f"arm {spec}")
                ident = armed_id(out)
                if ident is None:
                    raise StepError(f"ctl arm {spec}: answer not understood: {out.strip()!r}")
                self.armed[ident] = (point, spec)
                steps.append(out.strip())
        except StepError as err:
            self.fail(point, str(err))
            self.answer("not-armed")
            return
        self.answer("armed")
        log(f"{point}: " + "; ".join(steps) + "; answered armed")

    def tdr_done(self, point):
        """Prints ctl list; every injection armed must have fired."""
        try:
            text = self.ctl("list")
            log(f"{point}: ctl list:")
            for line in text.rstrip("\n").split("\n"):
                log(f"    {line}")
            listing = json.loads(self.ctl("list --json"))
            missing = unfired(listing, self.armed)
            for ident, where, spec in missing:
                self.fail(point, f"injection {ident} ({spec}, armed at {where}) never fired")
            if not missing:
                log(f"{point}: all {len(self.armed)} injection(s) armed fired")
        except (StepError, ValueError) as err:
            self.fail(point, str(err))
        self.answer("go")

    def handle(self, point):
        self.seen[point] = self.seen.get(point, 0) + 1
        if self.args.plan in ("tdr", "tdr-cdev"):
            if point in TDR_ARMS:
                self.tdr_arm(point)
            elif point in (TDR_DONE, CDEV_TDR_DONE):
                self.tdr_done(point)
            else:
                log(f"WARNING: {point}: not a point of plan tdr; answered go")
                self.answer("go")
            return
        if self.args.plan == "scanout" and point != "boot":
            if point == "scanout-stop-cont":
                self.stop_cont_screens(point)
            elif point == "scanout-reset":
                self.screen_matches(point, SCANOUT_POINTS[point])
                self.reset_vm(point)
            elif point == "scanout-off-after-reset":
                self.screen_not_stale(point)
            elif point in SCANOUT_POINTS:
                self.compare_screen(point)
            else:
                log(f"WARNING: {point}: not a point of plan scanout; answered go")
                self.answer("go")
            return
        if point == "boot":
            if self.seen[point] == 1:
                self.answer("first")
                log("boot: answered first")
            elif self.seen[point] == self.resets + 1:
                if self.args.plan == "scanout":
                    self.screen_after_reset()
                self.answer("after-reset")
                log("boot: answered after-reset")
            else:
                # A boot the host did not cause (a panic with panic=-1, a guest reboot): stop
                # here rather than loop.
                self.fail(point, f"boot #{self.seen[point]} after {self.resets} system_reset(s):"
                                 " the guest rebooted by itself; quitting QEMU")
                try:
                    self.qmp.execute("quit")
                except StepError as err:
                    self.fail(point, str(err))
        elif point in ("paused-after-map", "transfer-running"):
            self.pause_resume(point, point == "transfer-running")
        elif point == "reset-point" and self.args.plan == "pause-only":
            self.answer("no-reset")
            log("reset-point: answered no-reset (plan pause-only)")
        elif point == "reset-point":
            self.reset_vm(point)
        else:
            log(f"WARNING: {point}: not a point of plan {self.args.plan}; answered go")
            self.answer("go")

    def run(self):
        deadline = time.monotonic() + self.args.timeout
        try:
            while True:
                for line in self.console.lines():
                    point = sync_point(line)
                    if point:
                        self.handle(point)
                self.drain_sync()
                if time.monotonic() > deadline:
                    self.fail("vmctl", f"QEMU still running after {self.args.timeout:.0f}s")
                    break
                ready, _, _ = select.select([self.qmp], [], [], 0.1)
                if ready:
                    self.qmp.poll_events()
        except QemuGone:
            # The guest's last lines may still be in flight to the log: one more look.
            for line in self.console.lines():
                point = sync_point(line)
                if point:
                    self.fail(point, "seen after QEMU had exited")
            if any(e.get("event") == "SHUTDOWN" for e in self.qmp.events):
                log("QEMU exited (QMP closed)")
            else:
                # A SHUTDOWN event comes with every orderly exit (poweroff, quit, a signal).
                self.fail("vmctl", "QEMU closed QMP without a SHUTDOWN event: it crashed")
        return self.finish()

    def finish(self):
        want = PLAN_POINTS.get(self.args.plan, [])
        missing = [p for p in want if p not in self.seen]
        if missing:
            self.fail("plan", f"points never seen: {', '.join(missing)}")
        elif self.args.plan in ("lifecycle", "scanout") and self.seen.get("boot", 0) < 2:
            self.fail("plan", "no boot after the system_reset")
        seen = ", ".join(f"{p}x{n}" for p, n in self.seen.items()) or "none"
        log(f"summary: points seen: {seen}; {len(self.failures)} failure(s)")
        for f in self.failures:
            log(f"  failure: {f}")
        return 1 if self.failures else 0


def main():
    ap = argparse.ArgumentParser(
        prog="python3 -m gpuhost.vmctl", description=__doc__.split("\n\n")[0])
    ap.add_argument("--qmp", required=True, help="QMP socket QEMU creates (-qmp unix:PATH,server=on,wait=off)")
    ap.add_argument("--sync", required=True, help="socket of the guest's /dev/ttyS1 (-chardev socket,server=on,wait=off)")
    ap.add_argument("--console-log", required=True, help="file QEMU's stdout (the guest's ttyS0) goes to")
    ap.add_argument("--backend-log", required=True, help="the backend's log file")
    ap.add_argument("--plan", default="lifecycle", choices=sorted(PLAN_POINTS))
    ap.add_argument("--out-dir", default=".", help="where screendumps are kept (plan scanout)")
    ap.add_argument("--backend-bin", help="the backend binary, for its ctl command (plan tdr)")
    ap.add_argument("--ctl-socket", help="the backend's socket for ctl (plan tdr)")
    ap.add_argument("--step-timeout", type=float, default=30.0, help="seconds to wait for a backend line")
    ap.add_argument("--connect-timeout", type=float, default=60.0, help="seconds for QEMU to create the sockets")
    ap.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    args = ap.parse_args()

    def on_term(signum, _frame):
        log(f"stopped by signal {signum} before QEMU exited")
        sys.exit(1)

    signal.signal(signal.SIGTERM, on_term)
    return run_after_handshake(lambda: Vmctl(args), log)


if __name__ == "__main__":
    sys.exit(main())
