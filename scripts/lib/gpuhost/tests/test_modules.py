import importlib
import pkgutil
import unittest

import gpuhost


class ModulesTest(unittest.TestCase):
    def test_every_module_imports(self):
        # The programs no test runs (vmctl, display_host, windows_vm_check) at least import:
        # their names from the shared modules resolve.
        names = [m.name for m in pkgutil.iter_modules(gpuhost.__path__) if m.name != "tests"]
        self.assertIn("vmctl", names)
        for name in names:
            with self.subTest(module=name):
                importlib.import_module(f"gpuhost.{name}")

    def test_the_programs_have_a_main(self):
        for name in ("vmctl", "display_host", "firmware_host", "windows_vm_check", "demo_report",
                     "checks", "verdicts", "display_pattern"):
            self.assertTrue(callable(importlib.import_module(f"gpuhost.{name}").main), name)


if __name__ == "__main__":
    unittest.main()
