"""The host side of the scripts' checks (scripts/test, scripts/display-test, scripts/firmware-test,
scripts/demo), as one package run with `python3 -m gpuhost.<module>` and PYTHONPATH=scripts/lib
(the bash scripts set it: GPUHOST_PYTHON in scripts/lib/common.sh). Standard library only.

Shared pieces:
  hostlog          the "<PREFIX> [  12.3s] message" lines each program logs to stderr
  qmp              the QMP client (QEMU's JSON monitor) and the Unix-socket connect
  serial           the guest's console log (tailed) and its sync channel (ttyS1)
  verdicts         "<MARKER> <check> PASS|FAIL|XFAIL|XPASS <detail>" lines: making, counting,
                   reading them (and `python3 -m unittest -v` output)
  info_pci         QEMU's `info pci` text, parsed
  display_pattern  PPM screendumps against the display pattern, colour counts

Programs (each `python3 -m gpuhost.NAME --help`):
  vmctl            the VM-lifecycle and scanout scenarios' host side (scripts/lib/gpu.sh)
  display_host     the external-driver display tests' host side (scripts/display-test)
  firmware_host    the firmware checks' host side (scripts/firmware-test)
  windows_vm_check the checks of a Windows VM on an empty disk (scripts/test)
  demo_report      the main job's JSON report (scripts/demo)
  checks           scripts/test's judgements: minimum Rust, bench, display bench and soak JSON,
                   and the Python unit tests' results

Unit tests: gpuhost/tests, run by scripts/test as
`python3 -m unittest discover -v -s scripts/lib/gpuhost/tests -t scripts/lib`.
"""
