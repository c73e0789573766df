#!/bin/sh
# PID 1 of the kernel-driver test guest (installed as /init by scripts/build-guest --kind kmod).
# Unlike the wddm guest, which drives the GPU from user space, this one loads a kernel driver of
# its own: wddm_gpu_kmod (guest-tests/kmod), after the kernel package's DRM modules it needs or
# will need (/lib/modules/load-order: drm, ttm, drm_ttm_helper, gpu-sched and their
# dependencies). Kernel command line: wddm.args=kmod[,COUNT] (COUNT submissions in the MSI-X run,
# default 32; the INTx run makes 8).
#
# Runs: the driver with force_intx=1 (the INTx line), the test program, the driver unloaded;
# then the driver with MSI-X (a vector for configuration changes, one for the control queue)
# and the test program again. Checks are "GUEST-TEST kmod_<name> PASS|FAIL ..."; the last line
# before WDDM-GUEST-EXIT is "GUEST-KMODSUMMARY ...".
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
set -f

mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# Nothing may request a module behind our back.
echo > /proc/sys/kernel/modprobe

check() { # check NAME OK(0/1) DETAIL
    if [ "$2" = 0 ]; then echo "GUEST-TEST kmod_$1 PASS $3"; else echo "GUEST-TEST kmod_$1 FAIL $3"; fi
}

count=32
cmd=""
# shellcheck disable=SC2013 # the command line is one line of words
for word in $(cat /proc/cmdline); do
    case "$word" in
        wddm.args=*) cmd="$(echo "${word#wddm.args=}" | tr ',' ' ')" ;;
    esac
done
set -- $cmd
mode="${1:-}"
case "$mode" in
    kmod) [ -n "${2:-}" ] && count="$2" ;;
    # kmod-tdr,HANG_NTH,LOST_NTH,SLOW_NTH: the host armed `hang nth=HANG_NTH`,
    # `lost-interrupt nth=LOST_NTH` and `slow 3s nth=SLOW_NTH` before the boot; the test lines
    # its submissions up with them.
    kmod-tdr) hang_nth="${2:-3}" lost_nth="${3:-9}" slow_nth="${4:-10}" ;;
    *)
        echo "GUEST-TEST kmod_command FAIL this guest runs only the commands kmod and kmod-tdr, not '${1:-}'"
        echo "WDDM-GUEST-EXIT 2"
        poweroff -f
        ;;
esac

rc=0
loaded=0
failed=""
while read -r mod; do
    if busybox insmod "/lib/modules/${mod}.ko" 2>/tmp/insmod.err; then
        loaded=$((loaded + 1))
    else
        failed="${failed} ${mod}($(cat /tmp/insmod.err))"
    fi
done </lib/modules/load-order
rm -f /tmp/insmod.err
check drm_modules_loaded "$([ -z "$failed" ] && echo 0 || echo 1)" \
    "${loaded} of the kernel package's modules loaded: $(tr '\n' ' ' </lib/modules/load-order)${failed:+; failed:${failed}}"
[ -z "$failed" ] || rc=1

# wait_node PRESENT(1/0): waits (TCG is slow) until the render node appears or goes.
wait_node() {
    waited=0
    while [ "$waited" -lt 100 ]; do
        if [ "$1" = 1 ]; then (set +f; ls /dev/dri/renderD* >/dev/null 2>&1) && return 0
        else (set +f; ls /dev/dri/renderD* >/dev/null 2>&1) || return 0
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    return 1
}

# run LABEL PARAMS COUNT MODE: load the driver with PARAMS, run the test (MODE: its IRQ mode,
# then "ttm" for the buffer-object and eviction test), unload it.
run() {
    label="$1" params="$2" n="$3" mode="$4"
    # shellcheck disable=SC2086 # PARAMS are words on purpose
    if ! busybox insmod /lib/modules/wddm_gpu_kmod.ko $params 2>/tmp/insmod.err; then
        check "${label}_driver_loaded" 1 "insmod wddm_gpu_kmod ${params}: $(cat /tmp/insmod.err)"
        rm -f /tmp/insmod.err
        rc=1
        return
    fi
    rm -f /tmp/insmod.err
    wait_node 1
    node_rc=$?
    # A probe that failed: the kernel's side of it, whole.
    [ "$node_rc" = 0 ] || dmesg | tail -n 40 | sed "s/^/KMOD-DMESG ${label} probe: /"
    check "${label}_driver_loaded" "$node_rc" "insmod wddm_gpu_kmod ${params:-(no parameters)}; render node $(set +f; echo /dev/dri/renderD*); force_intx=$(cat /sys/module/wddm_gpu_kmod/parameters/force_intx)"
    # shellcheck disable=SC2086 # MODE is the IRQ mode and, for the MSI-X run, "ttm"
    /bin/wddm-kmod-test "$label" "$n" $mode
    trc=$?
    if [ "$trc" -ne 0 ]; then
        echo "GUEST-TEST kmod_${label}_test_exit FAIL wddm-kmod-test exited ${trc}"
        rc=1
    fi
    if busybox rmmod wddm_gpu_kmod 2>/tmp/rmmod.err && wait_node 0; then
        check "${label}_driver_unloaded" 0 "rmmod: the device reset, the render node gone"
    else
        check "${label}_driver_unloaded" 1 "rmmod: $(cat /tmp/rmmod.err 2>/dev/null)"
        rc=1
    fi
    rm -f /tmp/rmmod.err
    # Nothing the kernel complained about from the load to the unload.
    warn="$(dmesg | grep -a -E 'WARNING:|BUG:|Oops|general protection|refcount_t|list_(add|del) corruption' | head -n 3 | tr '\n' ' ')"
    check "${label}_no_kernel_warning" "$([ -z "$warn" ] && echo 0 || echo 1)" "${warn:-dmesg from load to unload has no WARNING, BUG or Oops}"
    dmesg -c | grep -a -E 'wddm_gpu' | sed "s/^/KMOD-DMESG ${label}: /"
}

dmesg -c >/dev/null
if [ "$mode" = kmod-tdr ]; then
    # drm_sched's job timeout at 500 ms (TdrDelay is 2 s) so the recoveries are quick.
    run tdr tdr_timeout_ms=500 0 "msix tdr ${hang_nth} ${lost_nth} ${slow_nth}"
    echo "GUEST-KMODSUMMARY kmod-tdr run done (hang at submission ${hang_nth}, lost interrupt at ${lost_nth}, slow at ${slow_nth})"
else
    run intx force_intx=1 8 intx
    run msix "" "$count" "msix ttm"
    echo "GUEST-KMODSUMMARY kmod runs done (INTx: 8 submissions; MSI-X: ${count})"
fi
echo "WDDM-GUEST-EXIT ${rc}"
sync
poweroff -f
