import os
import tempfile
import unittest
import xml.etree.ElementTree as ET

from gpuhost import libvirt_xml

REPO = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")


def domain(path):
    return ET.parse(os.path.join(REPO, path)).getroot()


class WindowsTest(unittest.TestCase):
    def test_the_disk_and_store_are_set_and_isos_and_tcp_serial_dropped(self):
        root = domain("qemu-configs/windows/libvirt/win11-ivshmem.xml")
        libvirt_xml.windows(root, "/run/x/disk.qcow2", "/run/x/VARS.fd")
        disks = root.findall("devices/disk")
        self.assertEqual([d.get("device") for d in disks], ["disk"])
        self.assertEqual(disks[0].find("source").get("file"), "/run/x/disk.qcow2")
        self.assertEqual(root.find("os/nvram").text, "/run/x/VARS.fd")
        self.assertIsNone(root.find("devices/serial"))
        # The GPU, the VRAM and the TPM stay.
        self.assertEqual(root.find("devices/shmem").get("name"), "vhost-user-wddm-gpu-libvirt.vram")
        self.assertIsNotNone(root.find("devices/tpm"))

    def test_the_emulator_is_set_and_the_qemu_namespace_kept_in_mode_2(self):
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "d.xml")
            source = os.path.join(REPO, "qemu-configs/windows/libvirt/win11-shmem-qemu11.xml")
            code = libvirt_xml.main([source, out, "windows", "--disk", "/d", "--nvram", "/n",
                                     "--emulator", "/opt/qemu-11.1"])
            self.assertEqual(code, 0)
            with open(out, encoding="utf-8") as written:
                text = written.read()
        root = ET.fromstring(text)
        self.assertEqual(root.find("devices/emulator").text, "/opt/qemu-11.1")
        # libvirt reads qemu:commandline by its namespace; the prefix stays the one users know.
        self.assertIn('xmlns:qemu="http://libvirt.org/schemas/domain/qemu/1.0"', text)
        self.assertIn("<qemu:commandline>", text)
        args = [a.get("value") for a in root.iter("{http://libvirt.org/schemas/domain/qemu/1.0}arg")]
        self.assertIn("-device", args)

    def test_without_an_emulator_option_the_domain_keeps_its_own(self):
        root = domain("qemu-configs/windows/libvirt/win11-ivshmem.xml")
        libvirt_xml.windows(root, "/d", "/n")
        self.assertEqual(root.find("devices/emulator").text, "/usr/bin/qemu-system-x86_64")

    def test_a_domain_without_a_system_disk_is_refused(self):
        root = ET.fromstring("<domain><os><nvram>x</nvram></os><devices/></domain>")
        with self.assertRaisesRegex(libvirt_xml.DomainError, "0 system disks"):
            libvirt_xml.windows(root, "d", "n")


class LinuxTest(unittest.TestCase):
    def test_kernel_initrd_cmdline_and_console_are_set(self):
        root = domain("qemu-configs/libvirt/linux-guest-ivshmem.xml")
        libvirt_xml.linux(root, "/k", "/i", "console=ttyS0 wddm.args=suite", "/c.log")
        self.assertEqual(root.find("os/kernel").text, "/k")
        self.assertEqual(root.find("os/initrd").text, "/i")
        self.assertEqual(root.find("os/cmdline").text, "console=ttyS0 wddm.args=suite")
        self.assertEqual(root.find("devices/serial/source").get("path"), "/c.log")
        self.assertEqual(root.find("devices/console/source").get("path"), "/c.log")

    def test_mode_2_sets_the_emulator_and_keeps_the_gpu_on_qemus_command_line(self):
        root = domain("qemu-configs/libvirt/linux-guest-shmem-qemu11.xml")
        libvirt_xml.linux(root, "/k", "/i", "c", "/c.log", emulator="/opt/qemu-11.1")
        self.assertEqual(root.find("devices/emulator").text, "/opt/qemu-11.1")
        args = [a.get("value") for a in root.iter("{http://libvirt.org/schemas/domain/qemu/1.0}arg")]
        self.assertTrue(any(a.startswith("vhost-user-test-device-pci,") for a in args), args)

    def test_the_command_line_writes_the_file(self):
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "d.xml")
            source = os.path.join(REPO, "qemu-configs/libvirt/linux-guest-ivshmem.xml")
            code = libvirt_xml.main([source, out, "linux", "--kernel", "/k", "--initrd", "/i",
                                     "--cmdline", "c", "--console", "/l"])
            self.assertEqual(code, 0)
            self.assertEqual(ET.parse(out).getroot().find("os/kernel").text, "/k")


if __name__ == "__main__":
    unittest.main()
