import contextlib
import io
import json
import unittest

from gpuhost import checks

BENCH = {name: 1.5 for name in checks.BENCH_FIGURES}
BENCH.update({"rounds": 5, "spread": {}, "targets": {"transfer_vs_memcpy":
                                                       {"target": ">= 0.8", "pass": True}}})


def package(name, rust_version, source="registry+https://github.com/rust-lang/crates.io-index"):
    return {"name": name, "rust_version": rust_version, "source": source}


class MsrvTest(unittest.TestCase):
    META = {"packages": [package("vhost", "1.89"), package("libc", "1.63"),
                         package("nover", None), package("wddm", "1.89", None),
                         package("guest", "1.89.0", None)]}
    README = "A Rust toolchain (cargo 1.89 or newer, what the locked dependencies need)"
    COMMON = "readonly _RUST_MIN_VERSION=1.89\n"

    def run_msrv(self, meta, readme, common):
        printed = []
        return checks.msrv(meta, readme, common, out=printed.append), printed

    def test_all_agree(self):
        error, printed = self.run_msrv(self.META, self.README, self.COMMON)
        self.assertIsNone(error)
        self.assertEqual(printed, ["minimum Rust: 1.89 (vhost); workspace ['1.89', '1.89.0']"])

    def test_each_disagreement(self):
        meta = {"packages": self.META["packages"] + [package("newer", "1.90")]}
        error, printed = self.run_msrv(meta, "cargo 1.88 or newer", "")
        self.assertEqual(printed, ["minimum Rust: 1.90 (newer); workspace ['1.89', '1.89.0']"])
        self.assertEqual(error, "; ".join([
            "the workspace states rust-version ['1.89', '1.89.0'], the lock file needs 1.90 "
            "(newer)",
            "the README states 1.88, the lock file needs 1.90",
            "scripts/lib/common.sh checks for None, the lock file needs 1.90"]))

    def test_version_key(self):
        self.assertEqual(checks.version_key("1.89"), (1, 89, 0))
        self.assertLess(checks.version_key("1.9.9"), checks.version_key("1.10"))


class BenchTest(unittest.TestCase):
    def test_every_figure(self):
        self.assertIsNone(checks.bench(BENCH))

    def test_missing_zero_or_not_a_number(self):
        figures = dict(BENCH, memcpy_gbps=0, backend_rss_mib="12")
        del figures["pingpong_us_p50"]
        self.assertEqual(checks.bench(figures), "bench: missing or non-positive figures: "
                         "['memcpy_gbps', 'pingpong_us_p50', 'backend_rss_mib']")


class DisplayBenchTest(unittest.TestCase):
    def test_ratios_printed_never_judged(self):
        result = {"c": {}, "ours": {}, "setup": "x", "ours_vs_c": {
            "frames_per_s": {"ratio": 0.812, "goal": ">= 0.9", "met": False},
            "flush_rtt_us_p50": {"ratio": 1.1}}}
        printed = []
        self.assertIsNone(checks.display_bench(result, out=printed.append))
        self.assertEqual(printed, [
            "display bench: frames_per_s ours / C = 0.812 (goal >= 0.9: MISSED)",
            "display bench: flush_rtt_us_p50 ours / C = 1.1"])

    def test_ours_failed(self):
        self.assertEqual(checks.display_bench({"ours_error": "no answer"}),
                         "display bench: ours failed: no answer")


class SoakTest(unittest.TestCase):
    SOAK = {"soak_submissions": 1000000, "soak_seconds": 80.5, "soak_per_s": 12422,
            "soak_rss_anon_kib": [[0, 2048], [1000000, 2052]], "soak_rss_growth_kib": 4,
            "soak_rss_peak_over_settled_kib": 8, "soak_rss_flat": True}

    def test_flat(self):
        self.assertIsNone(checks.soak(self.SOAK))

    def test_growing(self):
        soak = dict(self.SOAK, soak_rss_flat=False, soak_rss_growth_kib=900)
        self.assertEqual(checks.soak(soak), "soak: the backend's RSS grew by 900 KiB: "
                                            "[[0, 2048], [1000000, 2052]]")

    def test_figures_missing(self):
        self.assertTrue(checks.soak(dict(self.SOAK, soak_submissions=10)).startswith(
            "soak: figures missing: {"))
        self.assertIsNotNone(checks.soak({"soak_submissions": 1000000}))


class MainTest(unittest.TestCase):
    def test_exit_status_and_error(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(checks.main(["bench", json.dumps(BENCH)]), 0)
        with self.assertRaises(SystemExit) as raised:
            checks.main(["soak", "{}"])
        self.assertEqual(raised.exception.code, "soak: figures missing: {}")


if __name__ == "__main__":
    unittest.main()


def stats(submissions=3, fill_count=2, mismatches=(), on_virtual=0, refusals=()):
    return {
        "packets": [{"kind": "fill", "count": fill_count, "faults": 0, "bytes": 64, "pages": 0}],
        "submissions": {"count": submissions, "faults": 0, "bytes": 64, "packets": fill_count,
                        "by_status": [{"status": "ok", "count": submissions}]},
        "segments": [{"segment": 1, "read_bytes": 0, "written_bytes": 64}],
        "nodes": [
            {"node": 0, "submissions": submissions, "faults": 0, "packets": fill_count,
             "bytes": 64},
            {"node": 1, "submissions": on_virtual, "faults": 0, "packets": on_virtual,
             "bytes": 0},
        ],
        "replay": {"mismatches": list(mismatches), "refusals": list(refusals)},
    }


class ReplayTest(unittest.TestCase):
    def test_the_same_counts_pass_and_are_printed(self):
        printed = []
        self.assertIsNone(checks.replay(stats(), stats(), out=printed.append))
        self.assertEqual(printed, ["replay: 3 submissions, 2 packets, 64 bytes: the same counts "
                                   "as the live run"])

    def test_different_counts_name_what_differs(self):
        error = checks.replay(stats(), stats(fill_count=1), out=lambda _: None)
        self.assertIn("replay: packets: live [('fill', 2, 0, 64, 0)], replayed [('fill', 1, 0, "
                      "64, 0)]", error)

    def test_the_virtual_node_counts_are_compared_and_can_be_required(self):
        printed = []
        self.assertIsNone(checks.replay(stats(on_virtual=4), stats(on_virtual=4),
                                        out=printed.append, need_virtual=True))
        self.assertEqual(printed, ["replay: 3 submissions, 2 packets, 64 bytes, 4 on the virtual "
                                   "node: the same counts as the live run"])
        error = checks.replay(stats(on_virtual=4), stats(on_virtual=3), out=lambda _: None)
        self.assertIn("replay: nodes: live", error)
        self.assertEqual(checks.replay(stats(), stats(), out=lambda _: None, need_virtual=True),
                         "replay: the live run made no submission on the virtual node")

    def test_a_refused_context_command_fails(self):
        error = checks.replay(stats(), stats(refusals=[{"entry": 3}]), out=lambda _: None)
        self.assertEqual(error, "replay: 1 context command(s) refused: [{'entry': 3}]")

    def test_a_mismatched_answer_fails(self):
        error = checks.replay(stats(), stats(mismatches=[{"fence": 7}]), out=lambda _: None)
        self.assertEqual(error, "replay: 1 answer(s) differ: [{'fence': 7}]")

    def test_no_summary_or_no_work_fails(self):
        replayed = stats()
        del replayed["replay"]
        self.assertEqual(checks.replay(stats(), replayed, out=lambda _: None),
                         "replay: no replay summary in the output")
        self.assertEqual(checks.replay(stats(submissions=0), stats(submissions=0),
                                       out=lambda _: None),
                         "replay: the live run made no submission")
