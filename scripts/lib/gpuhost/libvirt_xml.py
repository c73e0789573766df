"""A libvirt domain of the repository rewritten for one run of scripts/libvirt-test
(docs/libvirt.md): the paths a user edits by hand are set here, nothing else changes.

  python3 -m gpuhost.libvirt_xml SOURCE OUT windows --disk QCOW2 --nvram VARS [--emulator E]
      the system disk's file, the variable store's copy (and the emulator, for a QEMU that is not
      the host's); the install ISOs (CD-ROMs) are left out (an empty disk, as the test boots it)
      and so is the TCP serial port (a fixed port two runs could both want)
  python3 -m gpuhost.libvirt_xml SOURCE OUT linux --kernel K --initrd I --cmdline C --console LOG
          [--emulator E]
      the guest's kernel, initrd and command line, and the console's log file (and the emulator)

Standard library only. Exit 0, or 2 with the reason on stderr (an element the domain lacks).
"""

import argparse
import sys
import xml.etree.ElementTree as ET

# The prefix the domains use for QEMU's namespace (qemu:commandline); kept when written back.
ET.register_namespace("qemu", "http://libvirt.org/schemas/domain/qemu/1.0")


class DomainError(Exception):
    """The domain lacks what the rewrite sets."""


def _one(root, path):
    found = root.find(path)
    if found is None:
        raise DomainError(f"the domain has no {path}")
    return found


def set_emulator(root, emulator):
    """Sets the domain's emulator (a QEMU that is not the host's), when one is given."""
    if emulator is not None:
        _one(root, "devices/emulator").text = emulator


def windows(root, disk, nvram, emulator=None):
    """Points the system disk and the variable store (and the emulator, when given) at the run's
    files; drops the CD-ROMs and the TCP serial port."""
    devices = _one(root, "devices")
    set_emulator(root, emulator)
    system = [d for d in devices.findall("disk") if d.get("device") == "disk"]
    if len(system) != 1:
        raise DomainError(f"the domain has {len(system)} system disks, not 1")
    _one(system[0], "source").set("file", disk)
    _one(root, "os/nvram").text = nvram
    for element in list(devices):
        cdrom = element.tag == "disk" and element.get("device") == "cdrom"
        tcp_serial = element.tag == "serial" and element.get("type") == "tcp"
        if cdrom or tcp_serial:
            devices.remove(element)


def linux(root, kernel, initrd, cmdline, console, emulator=None):
    """Sets the guest's kernel, initrd, command line and console log (and the emulator, when
    given)."""
    set_emulator(root, emulator)
    _one(root, "os/kernel").text = kernel
    _one(root, "os/initrd").text = initrd
    _one(root, "os/cmdline").text = cmdline
    for path in ("devices/serial/source", "devices/console/source"):
        _one(root, path).set("path", console)


def main(argv):
    parser = argparse.ArgumentParser(prog="gpuhost.libvirt_xml")
    parser.add_argument("source")
    parser.add_argument("out")
    kinds = parser.add_subparsers(dest="kind", required=True)
    win = kinds.add_parser("windows")
    win.add_argument("--disk", required=True)
    win.add_argument("--nvram", required=True)
    lin = kinds.add_parser("linux")
    for option in ("--kernel", "--initrd", "--cmdline", "--console"):
        lin.add_argument(option, required=True)
    for kind in (win, lin):
        kind.add_argument("--emulator")
    args = parser.parse_args(argv)
    tree = ET.parse(args.source)
    try:
        if args.kind == "windows":
            windows(tree.getroot(), args.disk, args.nvram, args.emulator)
        else:
            linux(tree.getroot(), args.kernel, args.initrd, args.cmdline, args.console,
                  args.emulator)
    except DomainError as error:
        print(f"gpuhost.libvirt_xml: {args.source}: {error}", file=sys.stderr)
        return 2
    tree.write(args.out, encoding="unicode")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
