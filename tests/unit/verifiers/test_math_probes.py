"""Every math probe: reward 0, an expected outcome, bounded time, no runaway worker."""

import pytest

from rlvr.verifiers.probes.math import PROBES
from rlvr.verifiers.probes.runner import _Verifiers, run_probe


@pytest.fixture(scope="module")
def verifiers():
    vs = _Verifiers()
    yield vs
    vs.close()


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_math_probe(verifiers, probe):
    row = run_probe(probe, verifiers)
    assert row.reward == 0, row
    assert row.outcome in probe.expected, row
    assert row.host_effects == [], row
    assert row.seconds < 5.0, row  # hard limit 2 s + kill + restart


def test_suite_covers_the_issue_list():
    names = {p.name for p in PROBES}
    for required in ("two_boxes", "candidate_list", "set_answer", "inequality", "empty_box", "power_tower",
                     "megabyte_completion", "grader_injection"):
        assert required in names
