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


class DomainFilesTest(unittest.TestCase):
    """The domains as shipped: the test-signing domain is win11-ivshmem.xml with Secure Boot off,
    and the mode 2 domains end at a reboot (QEMU 11.1.3's reset crash, docs/lifecycle.md)."""

    SECURE = "qemu-configs/windows/libvirt/win11-ivshmem.xml"
    TESTSIGNING = "qemu-configs/windows/libvirt/win11-ivshmem-testsigning.xml"

    @staticmethod
    def without_firmware_name_and_disk(root):
        """The domain as text with what the two Windows 11 mode 1 domains may differ in taken out:
        the name, the loader, the variable store, SMM and the system disk's file."""
        root.remove(root.find("name"))
        os_ = root.find("os")
        os_.remove(os_.find("loader"))
        os_.remove(os_.find("nvram"))
        features = root.find("features")
        smm = features.find("smm")
        if smm is not None:
            features.remove(smm)
        system = [d for d in root.findall("devices/disk") if d.get("device") == "disk"]
        system[0].find("source").set("file", "")
        for element in root.iter():  # layout whitespace is not the machine
            element.tail = None
            if element.text is not None and not element.text.strip():
                element.text = None
        return ET.tostring(root, encoding="unicode")

    def test_the_testsigning_domain_has_secure_boot_off(self):
        root = domain(self.TESTSIGNING)
        loader = root.find("os/loader")
        self.assertEqual(loader.text, "/usr/share/OVMF/OVMF_CODE_4M.fd")
        self.assertNotEqual(loader.get("secure"), "yes")
        self.assertEqual(root.find("os/nvram").get("template"), "/usr/share/OVMF/OVMF_VARS_4M.fd")
        self.assertIsNone(root.find("features/smm"))
        # and the Secure Boot domain still has it on, with Microsoft's keys
        secure = domain(self.SECURE)
        self.assertEqual(secure.find("os/loader").get("secure"), "yes")
        self.assertIn("secboot", secure.find("os/loader").text)
        self.assertEqual(secure.find("os/nvram").get("template"),
                         "/usr/share/OVMF/OVMF_VARS_4M.ms.fd")

    def test_the_testsigning_domain_is_otherwise_the_secure_boot_domain(self):
        testsigning, secure = domain(self.TESTSIGNING), domain(self.SECURE)
        # Its own name, store and disk: both can be defined side by side.
        for path in ("name", "os/nvram"):
            self.assertNotEqual(testsigning.find(path).text, secure.find(path).text, path)
        disks = [[d.find("source").get("file") for d in r.findall("devices/disk")
                  if d.get("device") == "disk"] for r in (testsigning, secure)]
        self.assertNotEqual(disks[0], disks[1])
        self.assertEqual(self.without_firmware_name_and_disk(testsigning),
                         self.without_firmware_name_and_disk(secure))

    def test_the_mode_2_domains_end_at_a_reboot(self):
        for path in ("qemu-configs/windows/libvirt/win11-shmem-qemu11.xml",
                     "qemu-configs/libvirt/linux-guest-shmem-qemu11.xml"):
            root = domain(path)
            self.assertIn("vhost-user-test-device-pci", ET.tostring(root, encoding="unicode"))
            on_reboot = root.find("on_reboot")
            self.assertIsNotNone(on_reboot, path)
            self.assertEqual(on_reboot.text, "destroy", path)


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
