"""Verdict lines, shared by the host programs and read by scripts/test:

  <MARKER> <check> PASS|FAIL|XFAIL|XPASS <detail>
  <SUMMARY> <n> passed, <m> failed        (e.g. DISPLAY-RESULT and DISPLAY-SUMMARY)

PASS and XFAIL (a failure expected and reported as such) count as passed; FAIL and XPASS (an
expected failure that passed: the expectation is stale) as failed. Also reads
`python3 -m unittest -v` output into the same verdicts (`python3 -m gpuhost.verdicts unittest
LOG`). Standard library only.
"""

import re
import sys

PASSING = ("PASS", "XFAIL")
VERDICTS = ("PASS", "FAIL", "XFAIL", "XPASS")


def verdict(ok, expected_failure=False):
    """The verdict of a check that passed (ok) or not, and was expected to fail or not."""
    if expected_failure:
        return "XPASS" if ok else "XFAIL"
    return "PASS" if ok else "FAIL"


def passes(word):
    """Does this verdict count as passed?"""
    return word in PASSING


def result_line(marker, name, word, detail):
    return f"{marker} {name} {word} {detail}"


def print_results(marker, results, summary=None):
    """Prints one verdict line per (name, verdict, detail), then "<SUMMARY> <n> passed, <m>
    failed" when a summary marker is given; returns (passed, failed)."""
    passed = failed = 0
    for name, word, detail in results:
        print(result_line(marker, name, word, detail), flush=True)
        if passes(word):
            passed += 1
        else:
            failed += 1
    if summary:
        print(f"{summary} {passed} passed, {failed} failed", flush=True)
    return passed, failed


def parse_result_line(marker, line):
    """(name, verdict, detail) of a "<MARKER> <name> <verdict> <detail>" line, or None (another
    line, or an unknown verdict)."""
    fields = line.rstrip("\r\n").split(" ", 3)
    if len(fields) < 3 or fields[0] != marker or fields[2] not in VERDICTS:
        return None
    return fields[1], fields[2], fields[3] if len(fields) > 3 else ""


def judge_results(marker, text):
    """(passed, failed, names failed) of every verdict line of `text` with this marker."""
    passed, failed, bad = 0, 0, []
    for line in text.splitlines():
        got = parse_result_line(marker, line)
        if got is None:
            continue
        if passes(got[1]):
            passed += 1
        else:
            failed += 1
            bad.append(got[0])
    return passed, failed, bad


# `python3 -m unittest -v`: "test_x (package.module.Class.test_x) ... ok" (Python 3.11; before,
# the parentheses hold package.module.Class); a test with a docstring has its first line on the
# next line, where " ... ok" then ends; each failed subtest gets a line
# "  test_x (...) (i=1) ... FAIL" after its test's line (which then has no outcome); a test module
# that does not import is "package.module (unittest.loader._FailedTest.package.module) ... ERROR".
# A test's own output may come first on the line. The verdicts end at the first separator line
# (the failures' tracebacks follow), then "Ran N tests in 0.01s" and "OK" or "FAILED (...)".
UNIT_START_RE = re.compile(r"([\w.]+) \(([\w.]+)\)")
UNIT_OUTCOME_RE = re.compile(
    r" \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
UNIT_SEPARATOR_RE = re.compile(r"^(={20}|-{20})")
UNIT_RAN_RE = re.compile(r"^Ran (\d+) tests? in ")
UNIT_END_RE = re.compile(r"^(OK|FAILED)\b")
UNIT_FAILED_IMPORT = "unittest.loader._FailedTest."
UNIT_VERDICTS = {"ok": "PASS", "FAIL": "FAIL", "ERROR": "FAIL", "expected failure": "XFAIL",
                 "unexpected success": "XPASS"}


def unittest_test_id(name, where):
    """The test's id from "name (where)": where itself when it ends with the test's name
    (Python 3.11), else where.name; a module that did not import is named alone."""
    if where.startswith(UNIT_FAILED_IMPORT):
        return where[len(UNIT_FAILED_IMPORT):]
    if name.endswith(where.rsplit(".", 1)[-1]):
        return where
    return f"{where}.{name}"


def unittest_results(text, strip_prefix=""):
    """(results, problems) of `python3 -m unittest -v` output: results are (test id, verdict)
    in order (verdict SKIP for a skipped test, which counts neither way), the test id without
    strip_prefix; problems say what makes the run incomplete (no "Ran N tests" line, N not the
    number of tests read, no final OK or FAILED line)."""
    results, current, ran, ended, in_verdicts = {}, None, None, False, True
    for line in text.splitlines():
        line = line.rstrip("\r")
        if UNIT_SEPARATOR_RE.match(line):
            in_verdicts = False
        if in_verdicts:
            start = UNIT_START_RE.search(line)
            if start:
                current = unittest_test_id(*start.groups())
                if current.startswith(strip_prefix):
                    current = current[len(strip_prefix):]
            outcome = UNIT_OUTCOME_RE.search(line)
            if outcome and current is not None:
                word = outcome.group(1)
                got = "SKIP" if word.startswith("skipped") else UNIT_VERDICTS[word]
                # A failed subtest has a line of its own: one failure fails the test once.
                if results.get(current) in (None, "PASS", "SKIP"):
                    results[current] = got
                current = None
        ran_m = UNIT_RAN_RE.match(line)
        if ran_m:
            ran = int(ran_m.group(1))
        if ran is not None and UNIT_END_RE.match(line):
            ended = True
    problems = []
    if ran is None:
        problems.append("no 'Ran N tests' line (the run did not finish)")
    elif ran != len(results):
        problems.append(f"ran {ran} tests, {len(results)} verdicts read")
    if ran is not None and not ended:
        problems.append("no final OK or FAILED line")
    return list(results.items()), problems


def main(argv):
    """`unittest LOG [PREFIX]`: one "PY-UNIT <test> <verdict>" line per test of the log, then
    "PY-UNIT-SUMMARY <n> passed, <m> failed"; a problem is a "PY-UNIT-PROBLEM <text>" line and
    exit 1."""
    if len(argv) not in (2, 3) or argv[0] != "unittest":
        sys.exit(main.__doc__)
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        results, problems = unittest_results(f.read(), argv[2] if len(argv) > 2 else "")
    passed = failed = 0
    for test, word in results:
        print(f"PY-UNIT {test} {word}")
        if word == "SKIP":
            continue
        if passes(word):
            passed += 1
        else:
            failed += 1
    for problem in problems:
        print(f"PY-UNIT-PROBLEM {problem}")
    print(f"PY-UNIT-SUMMARY {passed} passed, {failed} failed")
    return 1 if problems or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
