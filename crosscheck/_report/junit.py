"""JUnit XML: one test case per comparison (and per failed backend), so CI systems show failures natively.

Names, errors and messages come from backends and workloads: control characters are dropped
(``one_line``, ``text.plain``), so that no backend's error makes the file invalid XML.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from crosscheck._errors import one_line
from crosscheck._report.report import Report
from crosscheck._report.text import plain

#: How a case's entries appear in a suite's name, in this order (entries not listed are left out).
NAME_PARTS = (
    ("workload", "workload {}"),
    ("source", "{}"),
    ("init", "{}"),
    ("layers", "L={}"),
    ("batch", "N={}"),
    ("dim", "d={}"),
    ("dtype", "{}"),
    ("seed", "seed={}"),
)


def junit_suite(report: Report, name: str) -> ET.Element:
    """A ``<testsuite>`` for one report: comparisons, failed and missing backends."""
    name = one_line(name)
    suite = ET.Element("testsuite", name=name)
    compared = {c.backend for c in report.comparisons}
    for c in report.comparisons:
        title = f"{c.backend} vs {c.reference}" + (f" [{c.parameter}]" if c.parameter else "")
        title = one_line(title + (" (its own loss)" if getattr(c, "question", None) == "derivative" else ""))
        case = ET.SubElement(suite, "testcase", classname=name, name=title)
        message = plain(c.message)
        if not c.passed:
            first = message.splitlines()[0] if message else c.status
            ET.SubElement(case, "failure", message=first, type=c.status).text = message
        elif c.unjudgeable:
            ET.SubElement(case, "system-out").text = message
    problems = (getattr(report, "oracle", None) or {}).get("problems", [])
    if problems:  # run-level findings of a workload's judge (an empty check, losses that differ)
        lines = [plain(str(p)) for p in problems]
        case = ET.SubElement(suite, "testcase", classname=name, name="oracle")
        ET.SubElement(case, "failure", message=one_line(lines[0]), type="oracle").text = "\n".join(lines)
    for result in report.backends.values():
        if result.name in compared or result.status == "ok":
            continue
        case = ET.SubElement(suite, "testcase", classname=name, name=one_line(result.name))
        text = one_line(f"{result.name}: {result.status}: {result.error}")
        if result.status == "failed" or (result.status == "unavailable" and result.required):
            ET.SubElement(case, "error", message=text, type=result.status).text = text
        else:
            ET.SubElement(case, "skipped", message=text)
    said = suite.findall("testcase/failure") + suite.findall("testcase/error")
    if not getattr(report, "passed", True) and not said:  # a sweep's record view has no verdict here
        # A run that failed with nothing above to say so (a contained workload's worker died: no
        # backend, no comparison): a case of its own, never a suite that reads as green.
        lines = [plain(str(p)) for p in report.problems] or ["the run failed"]
        case = ET.SubElement(suite, "testcase", classname=name, name="run")
        ET.SubElement(case, "error", message=one_line(lines[0]), type="run").text = "\n".join(lines)
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(len(suite.findall("testcase/failure"))))
    suite.set("errors", str(len(suite.findall("testcase/error"))))
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    _verdicts(suite, report)
    return suite


def _verdicts(suite: ET.Element, report: Report) -> None:
    """A workload's verdicts (where a port or a training first differs, and why) as the suite's
    ``<system-out>``, so that CI shows them (a sweep's record view has none)."""
    verdicts = report.verdicts() if callable(getattr(report, "verdicts", None)) else {}
    if verdicts:
        told = [plain(f"verdict of `{name}`: {text}") for name, text in verdicts.items()]
        ET.SubElement(suite, "system-out").text = "\n".join(told)


def write_junit(reports: Sequence[tuple[str, Report]], path: str | Path) -> None:
    """Write ``<testsuites>`` with one suite per ``(name, report)``."""
    root = ET.Element("testsuites", name="crosscheck")
    for name, report in reports:
        root.append(junit_suite(report, name))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def case_name(report: Report) -> str:
    """A readable suite name from the report's case: ``gaussian L=3 N=2 d=4 float32 seed=0``,
    ``workload mlp-gelu float64 seed=3`` (``NAME_PARTS``)."""
    case = report.case
    return one_line(" ".join(form.format(case[key]) for key, form in NAME_PARTS if key in case))
