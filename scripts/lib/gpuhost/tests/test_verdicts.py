import contextlib
import io
import unittest

from gpuhost import verdicts


class VerdictTest(unittest.TestCase):
    def test_verdicts(self):
        self.assertEqual(verdicts.verdict(True), "PASS")
        self.assertEqual(verdicts.verdict(False), "FAIL")
        self.assertEqual(verdicts.verdict(False, expected_failure=True), "XFAIL")
        self.assertEqual(verdicts.verdict(True, expected_failure=True), "XPASS")

    def test_what_passes(self):
        self.assertEqual([v for v in verdicts.VERDICTS if verdicts.passes(v)], ["PASS", "XFAIL"])
        self.assertFalse(verdicts.passes("SKIP"))

    def test_print_results_counts_and_summary(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            counts = verdicts.print_results(
                "DISPLAY-RESULT",
                [("a", "PASS", "fine"), ("b", "XFAIL", "known"), ("c", "XPASS", "stale"),
                 ("d", "FAIL", "")],
                "DISPLAY-SUMMARY")
        self.assertEqual(counts, (2, 2))
        self.assertEqual(out.getvalue().splitlines(), [
            "DISPLAY-RESULT a PASS fine", "DISPLAY-RESULT b XFAIL known",
            "DISPLAY-RESULT c XPASS stale", "DISPLAY-RESULT d FAIL ",
            "DISPLAY-SUMMARY 2 passed, 2 failed"])

    def test_print_results_without_summary(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            verdicts.print_results("WINVM-CHECK", [("x", "PASS", "d")])
        self.assertEqual(out.getvalue(), "WINVM-CHECK x PASS d\n")


class ParseTest(unittest.TestCase):
    def test_parse_result_line(self):
        self.assertEqual(
            verdicts.parse_result_line("FIRMWARE-RESULT",
                                       "FIRMWARE-RESULT boot1:bar_learned PASS backend: at 0x8\n"),
            ("boot1:bar_learned", "PASS", "backend: at 0x8"))
        self.assertEqual(verdicts.parse_result_line("M", "M check XFAIL"), ("check", "XFAIL", ""))

    def test_other_lines_are_none(self):
        for line in ("FIRMWARE-SUMMARY 3 passed, 0 failed", "M check MAYBE detail", "M check",
                     "XM check PASS", ""):
            self.assertIsNone(verdicts.parse_result_line("M", line), line)

    def test_judge_results(self):
        text = "\n".join(["noise", "M a PASS x", "M b FAIL y", "M c XFAIL", "M d XPASS z",
                          "M-SUMMARY 2 passed, 2 failed"])
        self.assertEqual(verdicts.judge_results("M", text), (2, 2, ["b", "d"]))

    def test_made_lines_read_back(self):
        line = verdicts.result_line("M", "n", verdicts.verdict(False, True), "why not")
        self.assertEqual(verdicts.parse_result_line("M", line), ("n", "XFAIL", "why not"))


UNITTEST_311 = """\
test_a (gpuhost.tests.test_x.ATest.test_a) ... ok
test_b (gpuhost.tests.test_x.ATest.test_b)
The first line of b's docstring. ... FAIL
test_c (gpuhost.tests.test_x.ATest.test_c) ... ERROR
test_d (gpuhost.tests.test_x.ATest.test_d) ... skipped 'not here'
test_e (gpuhost.tests.test_x.ATest.test_e) ... expected failure
test_f (gpuhost.tests.test_x.ATest.test_f) ... unexpected success

======================================================================
FAIL: test_b (gpuhost.tests.test_x.ATest.test_b)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 6 tests in 0.002s

FAILED (failures=1, errors=1, skipped=1, expected failures=1, unexpected successes=1)
"""


class UnittestOutputTest(unittest.TestCase):
    def test_every_outcome(self):
        results, problems = verdicts.unittest_results(UNITTEST_311, "gpuhost.tests.")
        self.assertEqual(results, [
            ("test_x.ATest.test_a", "PASS"), ("test_x.ATest.test_b", "FAIL"),
            ("test_x.ATest.test_c", "FAIL"), ("test_x.ATest.test_d", "SKIP"),
            ("test_x.ATest.test_e", "XFAIL"), ("test_x.ATest.test_f", "XPASS")])
        self.assertEqual(problems, [])

    def test_before_python_311_the_class_alone(self):
        text = "test_a (pkg.mod.ATest) ... ok\n\nRan 1 test in 0.001s\n\nOK\n"
        self.assertEqual(verdicts.unittest_results(text),
                         ([("pkg.mod.ATest.test_a", "PASS")], []))

    def test_a_run_that_did_not_finish(self):
        _, problems = verdicts.unittest_results("test_a (m.A.test_a) ... ok\n")
        self.assertEqual(problems, ["no 'Ran N tests' line (the run did not finish)"])

    def test_a_module_that_does_not_import_fails(self):
        text = ("gpuhost.tests.test_y (unittest.loader._FailedTest.gpuhost.tests.test_y) ... "
                "ERROR\n\nRan 1 test in 0.000s\n\nFAILED (errors=1)\n")
        self.assertEqual(verdicts.unittest_results(text, "gpuhost.tests."),
                         ([("test_y", "FAIL")], []))

    def test_a_tests_own_output_before_its_line(self):
        text = "noisetest_a (m.A.test_a) ... ok\ntest_b (m.A) ... ok\nRan 2 tests in 0s\nOK\n"
        self.assertEqual(verdicts.unittest_results(text),
                         ([("m.A.test_a", "PASS"), ("m.A.test_b", "PASS")], []))

    def test_failed_subtests_fail_their_test_once(self):
        text = ("test_ok (p.T.test_ok) ... ok\ntest_s (p.T.test_s) ... \n"
                "  test_s (p.T.test_s) (i=1) ... FAIL\n  test_s (p.T.test_s) (i=2) ... FAIL\n"
                "\n======\nRan 2 tests in 0.03s\n\nFAILED (failures=2)\n")
        self.assertEqual(verdicts.unittest_results(text),
                         ([("p.T.test_ok", "PASS"), ("p.T.test_s", "FAIL")], []))

    def test_count_mismatch_and_no_end(self):
        text = "test_a (m.A.test_a) ... ok\nRan 2 tests in 0.1s\n"
        _, problems = verdicts.unittest_results(text)
        self.assertEqual(problems, ["ran 2 tests, 1 verdicts read", "no final OK or FAILED line"])

    def test_nothing_ran(self):
        results, problems = verdicts.unittest_results("\nRan 0 tests in 0.000s\n\nOK\n")
        self.assertEqual((results, problems), ([], []))


if __name__ == "__main__":
    unittest.main()
