import unittest

from gpuhost.display_host import FirmwareWatch

PLACEHOLDER = "640x480: 2 distinct colours; commonest rgb(0, 0, 0) covers 97.0%"
BLACK = "1280x800: 1 distinct colours; commonest rgb(0, 0, 0) covers 100.0%"
LOGO = "1280x800: 65 distinct colours; commonest rgb(0, 0, 0) covers 98.6%"


class FirmwareWatchTest(unittest.TestCase):
    def test_the_logo_is_seen_released_and_left(self):
        watch = FirmwareWatch(hold=60)
        # QEMU's placeholder text, then OVMF's black screen: no key yet.
        self.assertFalse(watch.frame(0.2, 2, PLACEHOLDER))
        self.assertFalse(watch.frame(3.0, 1, BLACK))
        self.assertIsNone(watch.seen)
        # The logo: Enter at once, again only after a second, until the frame leaves.
        self.assertTrue(watch.frame(4.0, 65, LOGO))
        self.assertFalse(watch.frame(4.3, 65, LOGO))
        self.assertTrue(watch.frame(5.1, 65, LOGO))
        self.assertTrue(watch.watching())
        self.assertFalse(watch.frame(6.0, 2, PLACEHOLDER))
        self.assertFalse(watch.watching())
        watch.boot(9.5)
        ok, detail = watch.result()
        self.assertTrue(ok)
        self.assertEqual(detail, f"{LOGO}; seen 4.0 s after start; OVMF holds the boot until Enter (60 s at "
                         "most); "
                         "Enter sent 2 time(s) from 4.0 s; the frame left at 6.0 s; "
                         "the kernel's first sync point at 9.5 s")

    def test_a_kernel_before_the_frame_fails(self):
        # What the old fixed 8 s screendump met on a fast machine: the guest was first.
        watch = FirmwareWatch(hold=60)
        watch.frame(0.2, 2, PLACEHOLDER)
        watch.boot(7.4)
        self.assertFalse(watch.watching())
        ok, detail = watch.result()
        self.assertFalse(ok)
        self.assertIn("the kernel booted (7.4 s) before a screendump showed the firmware's frame",
                      detail)
        self.assertIn("in 1 looks; the last: " + PLACEHOLDER, detail)
        self.assertIn("boot-option wait (60 s) ran out", detail)

    def test_qemus_placeholder_is_not_the_firmwares_frame(self):
        # Two colours after the firmware's reset of the GPU, never anything more: not seen.
        watch = FirmwareWatch(hold=60)
        for at in (1.0, 2.0, 3.0):
            self.assertFalse(watch.frame(at, 2, PLACEHOLDER))
        self.assertFalse(watch.result()[0])
        self.assertIn("the run ended before", watch.result()[1])

    def test_a_second_boot_does_not_move_the_first(self):
        watch = FirmwareWatch(hold=60)
        watch.frame(4.0, 65, LOGO)
        watch.boot(9.0)
        watch.boot(30.0)
        self.assertTrue(watch.result()[1].endswith("the kernel's first sync point at 9.0 s"))


if __name__ == "__main__":
    unittest.main()
