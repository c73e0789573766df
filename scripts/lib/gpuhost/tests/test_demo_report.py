import unittest

from gpuhost import demo_report


def kinds(**changes):
    found = {kind: {"count": 3, "verified": True} for kind in demo_report.BENCH_KINDS}
    found.update(changes)
    return found


class BenchOkTest(unittest.TestCase):
    def test_every_kind_measured_and_verified(self):
        self.assertTrue(demo_report.bench_ok({"ok": True, "kinds": kinds()}))

    def test_a_kind_missing_unverified_or_not_run(self):
        self.assertFalse(demo_report.bench_ok({"ok": False, "kinds": kinds()}))
        unrun = kinds(fence={"count": 0, "verified": True})
        self.assertFalse(demo_report.bench_ok({"ok": True, "kinds": unrun}))
        self.assertFalse(demo_report.bench_ok({"ok": True, "kinds": kinds(fill={"count": 1})}))
        missing = kinds()
        del missing["transfer"]
        self.assertFalse(demo_report.bench_ok({"ok": True, "kinds": missing}))
        self.assertFalse(demo_report.bench_ok(None))


class CompareLayoutsTest(unittest.TestCase):
    HOST = {"wddm_version": 0x3000, "paging_buffer_segment_id": 1, "paging_buffer_size": 65536,
            "paging_buffer_private_data_size": 0,
            "segments": [{"id": 1, "flags": 5, "base_address": 0, "size": 1 << 28,
                          "commit_limit": 1 << 28, "bar_offset": 0,
                          "system_memory_end_address": 0, "banks": 1}]}

    def test_the_same_layout(self):
        self.assertEqual(demo_report.compare_layouts(self.HOST, dict(self.HOST)), [])

    def test_every_difference_named(self):
        segment = dict(self.HOST["segments"][0], size=1 << 27)
        guest = dict(self.HOST, paging_buffer_size=4096, segments=[segment, segment])
        self.assertEqual(demo_report.compare_layouts(self.HOST, guest), [
            "paging_buffer_size: host 65536, guest 4096",
            "segment count: host 1, guest 2",
            "segment 1 size: host 268435456, guest 134217728"])


if __name__ == "__main__":
    unittest.main()
