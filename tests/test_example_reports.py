"""A passed example's subtest report, made without per-subtest capture, is pytest's own report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# Timing differs between any two reports; everything else must be identical.
_TIMING = {"start", "stop", "duration"}

_TEST_FILE = """
import json
import pytest
from pytest_modal_eval.collect.example_reports import PassedExampleLog

SEEN = []

@pytest.fixture(autouse=True)
def _record(request):
    class Recorder:
        @pytest.hookimpl
        def pytest_runtest_logreport(self, report):
            if isinstance(report, pytest.SubtestReport):
                SEEN.append(report)
    plugin = Recorder()
    request.config.pluginmanager.register(plugin)
    yield
    request.config.pluginmanager.unregister(plugin)
    config = request.config
    with open("reports.json", "w") as out:
        json.dump([config.hook.pytest_report_to_serializable(config=config, report=r)
                   for r in SEEN], out)

def test_both(request, subtests):
    with subtests.test(msg="example 7", reward="0.500", done="1/3"):
        pass
    PassedExampleLog(request.node).log("example 7", reward="0.500", done="1/3")
    print("printed by the test")
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_reports=_TEST_FILE)
    return pytester.runpytest_subprocess("-v", "-p", "no:randomly", *args)


def test_same_report_as_subtests_test(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    reports = json.loads((pytester.path / "reports.json").read_text())
    assert len(reports) == 2
    via_subtests, via_log = ({k: v for k, v in r.items() if k not in _TIMING} for r in reports)
    assert via_log == via_subtests
    assert via_log["_subtest.context"] == {
        "msg": "example 7",
        "kwargs": {"reward": "'0.500'", "done": "'1/3'"},
    }
    # The terminal shows the two subtests identically, and the test's own output stays captured.
    line = "test_reports.py::test_both SUBPASSED[[]example 7[]] (reward='0.500', done='1/3')*"
    result.stdout.fnmatch_lines([line, line])
    assert "printed by the test" not in result.stdout.str()
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "3"


def test_same_terminal_lines_under_xdist(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "-n", "1")
    result.assert_outcomes(passed=1)
    lines = [line for line in result.outlines if "SUBPASSED" in line]
    assert len(lines) == 2
    assert lines[0].split("SUBPASSED", 1)[1] == lines[1].split("SUBPASSED", 1)[1]
