"""The overlap policy (``streams.execution.overlap``)."""

import pytest

from streams.execution import overlap


@pytest.mark.parametrize("policy, running, action", [
    ("allow", True, overlap.Action.RUN), ("skip", True, overlap.Action.SKIP),
    ("buffer_one", True, overlap.Action.BUFFER), ("skip", False, overlap.Action.RUN),
    ("buffer_one", False, overlap.Action.RUN),
])
def test_overlap(policy, running, action):
    assert overlap.decide(policy, running) is action
