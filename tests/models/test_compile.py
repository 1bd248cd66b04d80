"""Every mixer's forward traces into one `torch.compile` graph (the `compile` option then
compiles all of it), except where a signed-feature mixer checks its denominator: raising
`DenominatorCollapse` needs a Python value (`.item()`), one break by design."""

import pytest
import torch

from models import MIXERS, build_mixer

CHECKS_DENOMINATOR = {"rff": 2}  # the check's .item(), counted in its frame and in forward's


@pytest.mark.parametrize("name", MIXERS.names())
def test_mixer_forward_has_no_graph_break(name: str) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    mixer = build_mixer(name, 16)
    explained = torch._dynamo.explain(mixer)(torch.randn(2, 9, 16))
    assert explained.graph_break_count == CHECKS_DENOMINATOR.get(name, 0), explained.break_reasons
