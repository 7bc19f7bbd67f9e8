"""A report's sections cross a process boundary by name (``crosscheck/_report/wire.py``): a workload's
render function, rebuilt in the parent; nothing else is imported from the data."""

from __future__ import annotations

import json

import pytest

from crosscheck._report.report import Section
from crosscheck._report.wire import from_wire, to_wire
from crosscheck._workloads.stack.explain import SECTION


def test_a_workloads_section_crosses_by_name_and_back():
    data = json.loads(json.dumps(to_wire(SECTION)))
    assert data == {"section": ["crosscheck._workloads.stack.explain", "render_explain", "after"]}
    back = from_wire(data)
    assert isinstance(back, Section) and back == SECTION


@pytest.mark.parametrize(
    "named",
    [
        ["os", "system", "after"],  # not crosscheck's
        ["crosscheck._report.table", "render_table", "after"],  # crosscheck's, but no workload's
        ["crosscheck._workloads.stack.explain", "<lambda>", "after"],  # no name to import it by
    ],
    ids=["elsewhere", "not-a-workload", "lambda"],
)
def test_a_section_that_is_no_workloads_is_refused(named):
    with pytest.raises(ValueError, match="must be crosscheck's own, a workload's"):
        from_wire({"section": named})
