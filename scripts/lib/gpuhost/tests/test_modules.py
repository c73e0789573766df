import builtins
import importlib
import pkgutil
import symtable
import unittest
from pathlib import Path

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


    def test_every_name_a_function_uses_is_defined(self):
        # Importing runs no function body: a name misspelt or never bound inside one (a variable
        # of another function, say) shows only when that path runs in a VM. The symbol tables
        # show it now: a free name must be a module global or a builtin.
        for path in sorted(Path(gpuhost.__path__[0]).rglob("*.py")):
            with self.subTest(file=path.name):
                self.assertEqual(undefined_names(path.read_text(), str(path)), [])

    def test_the_undefined_name_check_sees_one(self):
        source = "import os\nX = 1\ndef f(a):\n    return os.sep, X, a, len, missing\n"
        self.assertEqual(undefined_names(source, "sample.py"), [("f", "missing")])


def undefined_names(source, filename):
    """(function, name) for every name a function reads that no scope binds."""
    module = symtable.symtable(source, filename, "exec")
    known = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported()}
    known |= set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__package__"}
    missing = []

    def walk(table):
        for child in table.get_children():
            for sym in child.get_symbols():
                if sym.is_referenced() and sym.is_global() and sym.get_name() not in known:
                    missing.append((child.get_name(), sym.get_name()))
            walk(child)

    walk(module)
    return missing


if __name__ == "__main__":
    unittest.main()
