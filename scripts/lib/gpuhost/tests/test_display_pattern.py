import os
import tempfile
import unittest

from gpuhost import display_pattern


def pattern(width, height, variant="a"):
    return b"".join(display_pattern.pattern_row(y, width, variant) for y in range(height))


class PpmFiles(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def ppm(self, width, height, pixels, header=None):
        path = os.path.join(self.dir.name, f"shot{len(os.listdir(self.dir.name))}.ppm")
        with open(path, "wb") as f:
            f.write(header if header is not None else b"P6\n%d %d\n255\n" % (width, height))
            f.write(bytes(pixels))
        return path


class ReadPpmTest(PpmFiles):
    def test_reads_qemus_header_and_a_comment(self):
        path = self.ppm(2, 1, b"\x01\x02\x03\x04\x05\x06", b"P6\n# QEMU\n2 1\n255\n")
        self.assertEqual(display_pattern.read_ppm(path), (2, 1, b"\x01\x02\x03\x04\x05\x06"))

    def test_refuses_other_files(self):
        for header, pixels in ((b"P3\n1 1\n255\n", b"000"), (b"P6\n1 1\n65535\n", b"000000"),
                               (b"P6\n2 2\n255\n", b"\0" * 3), (b"P6\n", b"")):
            with self.assertRaises(display_pattern.PpmError, msg=header):
                display_pattern.read_ppm(self.ppm(0, 0, pixels, header))


class PatternTest(unittest.TestCase):
    def test_pattern_row_matches_display_check_c(self):
        row = display_pattern.pattern_row(3, 4)
        self.assertEqual(list(row[:3]), [3, 0, 39])          # x=0: 0^3, 3>>2, 13*3
        self.assertEqual(list(row[9:12]), [0, 1, 60])        # x=3: 3^3, 6>>2, 21+39

    def test_variant_b_inverts_every_byte(self):
        a, b = display_pattern.pattern_row(7, 16), display_pattern.pattern_row(7, 16, "b")
        self.assertEqual(bytes(x ^ 0xFF for x in a), bytes(b))


class CompareTest(PpmFiles):
    def test_the_pattern_matches(self):
        ok, detail = display_pattern.compare(self.ppm(32, 8, pattern(32, 8)), 32, 8)
        self.assertTrue(ok)
        self.assertEqual(detail, "32x8: all 256 pixels match pattern a")

    def test_variant_b(self):
        path = self.ppm(16, 4, pattern(16, 4, "b"))
        self.assertTrue(display_pattern.compare(path, 16, 4, "b")[0])
        ok, detail = display_pattern.compare(path, 16, 4, "a")
        self.assertFalse(ok)
        self.assertIn("64 of 64 pixels differ from pattern a", detail)

    def test_the_first_differing_pixel(self):
        pixels = bytearray(pattern(8, 4))
        pixels[3 * (8 * 2 + 5):3 * (8 * 2 + 5) + 3] = b"\xff\x00\x00"
        ok, detail = display_pattern.compare(self.ppm(8, 4, pixels), 8, 4)
        self.assertFalse(ok)
        want = tuple(display_pattern.pattern_row(2, 8)[15:18])
        self.assertEqual(detail, "8x4: 1 of 32 pixels differ from pattern a; first at (5,2):"
                                 f" rgb(255, 0, 0), expected rgb{want}")

    def test_another_size(self):
        ok, detail = display_pattern.compare(self.ppm(4, 4, pattern(4, 4)), 8, 4)
        self.assertFalse(ok)
        self.assertEqual(detail, "screendump is 4x4, the guest drew 8x4")


class ColourTest(PpmFiles):
    def test_a_single_colour(self):
        path = self.ppm(4, 2, b"\x10\x20\x30" * 8)
        self.assertEqual(display_pattern.colour_count(path),
                         (1, "4x2: 1 distinct colours; commonest rgb(16, 32, 48) covers 100.0%"))
        self.assertFalse(display_pattern.colour_stats(path)[0])

    def test_counts_and_the_commonest(self):
        path = self.ppm(4, 1, b"\0\0\0" * 3 + b"\xff\xff\xff")
        colours, detail = display_pattern.colour_count(path)
        self.assertEqual(colours, 2)
        self.assertIn("commonest rgb(0, 0, 0) covers 75.0%", detail)
        self.assertTrue(display_pattern.colour_stats(path)[0])

    def test_a_firmware_frame_has_more_colours_than_qemus_placeholder(self):
        # QEMU's "not initialized" text: white on black. OVMF's logo on black: many colours.
        placeholder = self.ppm(4, 1, b"\0\0\0" * 3 + b"\xff\xff\xff")
        self.assertFalse(display_pattern.firmware_frame(placeholder)[0])
        self.assertFalse(display_pattern.firmware_frame(self.ppm(2, 1, b"\0" * 6))[0])
        logo = self.ppm(4, 1, b"\0\0\0" * 2 + b"\x10\x80\xf0" + b"\xff\xff\xff")
        self.assertEqual(display_pattern.firmware_frame(logo),
                         (True, "4x1: 3 distinct colours; commonest rgb(0, 0, 0) covers 50.0%"))

    def test_the_pattern_has_many_colours(self):
        colours, _ = display_pattern.colour_count(self.ppm(64, 64, pattern(64, 64)))
        self.assertGreater(colours, 1000)


if __name__ == "__main__":
    unittest.main()
