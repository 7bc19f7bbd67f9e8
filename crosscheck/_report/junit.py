"""JUnit XML: one test case per comparison (and per failed backend), so CI systems show failures natively."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from crosscheck._report.report import Report


def junit_suite(report: Report, name: str) -> ET.Element:
    """A ``<testsuite>`` for one report: comparisons, failed and missing backends."""
    suite = ET.Element("testsuite", name=name)
    compared = {c.backend for c in report.comparisons}
    for c in report.comparisons:
        title = f"{c.backend} vs {c.reference}" + (f" [{c.parameter}]" if c.parameter is not None else "")
        title += " (its own loss)" if getattr(c, "question", None) == "derivative" else ""
        case = ET.SubElement(suite, "testcase", classname=name, name=title)
        if not c.passed:
            first = c.message.splitlines()[0] if c.message else c.status
            ET.SubElement(case, "failure", message=first, type=c.status).text = c.message
        elif c.unjudgeable:
            ET.SubElement(case, "system-out").text = c.message
    problems = (getattr(report, "oracle", None) or {}).get("problems", [])
    if problems:  # run-level findings of a workload's judge (an empty check, losses that differ)
        case = ET.SubElement(suite, "testcase", classname=name, name="oracle")
        ET.SubElement(case, "failure", message=problems[0], type="oracle").text = "\n".join(problems)
    for result in report.backends.values():
        if result.name in compared or result.status == "ok":
            continue
        case = ET.SubElement(suite, "testcase", classname=name, name=result.name)
        text = f"{result.name}: {result.status}: {result.error}"
        if result.status == "failed" or (result.status == "unavailable" and result.required):
            ET.SubElement(case, "error", message=text, type=result.status).text = text
        else:
            ET.SubElement(case, "skipped", message=text)
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(len(suite.findall("testcase/failure"))))
    suite.set("errors", str(len(suite.findall("testcase/error"))))
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    return suite


def write_junit(reports: Sequence[tuple[str, Report]], path: str | Path) -> None:
    """Write ``<testsuites>`` with one suite per ``(name, report)``."""
    root = ET.Element("testsuites", name="crosscheck")
    for name, report in reports:
        root.append(junit_suite(report, name))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def case_name(report: Report) -> str:
    """A readable suite name from the report's case."""
    case = report.case
    if "workload" in case:
        return f"workload {case['workload']} {case['dtype']} seed={case['seed']}"
    if case.get("source") == "user arrays":
        return f"user arrays L={case['layers']} N={case['batch']} d={case['dim']} {case['dtype']}"
    return (
        f"{case['init']} L={case['layers']} N={case['batch']} d={case['dim']} {case['dtype']} "
        f"seed={case['seed']}"
    )
