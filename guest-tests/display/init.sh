#!/bin/sh
# PID 1 of the display test guest (installed as /init by scripts/build-guest --kind display).
# Unlike the wddm guest, this one loads the kernel's own virtio_gpu driver (Debian's modules, in
# /lib/modules/load-order) and checks the display through it with /bin/display-check.
#
# Host protocol (scripts/lib/gpuhost/display_host.py): "GUEST-SYNC <point>" on the console
# (ttyS0), then one answer line read from /dev/ttyS1. Points: boot (answer: go), fb-drawn (the
# host takes its screendump; go), cursor-done (the host waits until the cursor messages left the
# backend; go), fb-redrawn (a second screendump; go), done (reboot or poweroff). Checks are "DISPLAY-CHECK <name> PASS|FAIL ...".
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
set -f

mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t debugfs debugfs /sys/kernel/debug

check() { # check NAME OK(0/1) DETAIL
    if [ "$2" = 0 ]; then echo "DISPLAY-CHECK $1 PASS $3"; else echo "DISPLAY-CHECK $1 FAIL $3"; fi
}

# sync POINT: tell the host, wait for its one-word answer (in $answer).
stty -F /dev/ttyS1 raw -echo 2>/dev/null
# Opened once for the whole run: an answer arriving while no process held the port open would be
# dropped when it is opened again.
exec 3</dev/ttyS1
sync_point() {
    echo "GUEST-SYNC $1"
    answer=""
    read -r answer <&3
    answer="$(echo "$answer" | tr -d '\r')"
}

sync_point boot

# The module and its dependencies, in dependency order.
loaded=0
failed=""
while read -r mod; do
    if busybox insmod "/lib/modules/${mod}.ko" 2>/tmp/insmod.err; then
        loaded=$((loaded + 1))
    else
        failed="${failed} ${mod}($(cat /tmp/insmod.err))"
    fi
done </lib/modules/load-order
check modules_loaded "$([ -z "$failed" ] && echo 0 || echo 1)" "${loaded} loaded${failed:+; failed:${failed}}"

# The driver probes asynchronously: wait (TCG is slow) for its nodes.
waited=0
while { [ ! -e /dev/fb0 ] || [ ! -e /dev/dri/card0 ]; } && [ "$waited" -lt 100 ]; do
    sleep 0.1
    waited=$((waited + 1))
done
check fb0_present "$([ -e /dev/fb0 ] && echo 0 || echo 1)" "after $((waited * 100)) ms ($(cat /sys/class/graphics/fb0/name 2>/dev/null))"
check drm_card0_present "$([ -e /dev/dri/card0 ] && echo 0 || echo 1)" "$(set +f; echo /dev/dri/*)"

# fbcon keeps the framebuffer (it set its mode) but must not draw over the pattern: no cursor
# (vt.global_cursor_default=0 on the command line too) and nothing printed on tty0.
echo 0 >/sys/class/graphics/fbcon/cursor_blink 2>/dev/null

if /bin/display-check fb; then fb_rc=0; else fb_rc=1; fi
check fb_pattern_drawn "$fb_rc" ""
sync_point fb-drawn

/bin/display-check drm
sync_point cursor-done

# The pattern again, after the DRM client's cursor messages on the same display socket: the
# host's second screendump shows QEMU read them in step (the screendump has no cursor).
if /bin/display-check fb; then fb_rc=0; else fb_rc=1; fi
check fb_pattern_redrawn "$fb_rc" "after the DRM client closed"
sync_point fb-redrawn

# The driver's and DRM's kernel lines, for the host to keep and check.
dmesg | grep -i -E 'virtio|drm|fb0|fbcon' | sed 's/^/DISPLAY-DMESG /'

sync_point "done"
sync
case "$answer" in
    reboot) reboot -f ;;
    *) poweroff -f ;;
esac
