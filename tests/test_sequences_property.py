"""Random sequence pipelines against their model (structexec.testing.strategies.pipelines).

Under ``sync_wait`` every item completes inside its ``start``, so the outcome (values in order,
the first error, stopped) must be exactly the model's, whatever the ``max_concurrency`` and
``ordered`` of the stages; under trio the ``let_each`` items run in worker tasks and a
concurrent unordered stage may complete them in another order. In both, the source generator
is finished (exhausted or closed) when the run ends.
"""

from __future__ import annotations

from hypothesis import given, settings

from structexec.testing import strategies as sxst


@settings(deadline=None, max_examples=sxst.max_examples(200))
@given(sxst.pipelines())
def test_pipelines_under_sync_wait_match_the_model(p: sxst.Pipeline) -> None:
    expected = p.model()
    got = sxst.run_pipeline(p)
    assert got == expected, (p, got, expected)
    assert p.closed == (["source"] if p.source_closed() else [])


@settings(deadline=None, max_examples=sxst.max_examples(60))
@given(sxst.pipelines())
async def test_pipelines_under_trio_match_the_model(p: sxst.Pipeline) -> None:
    expected = p.model(trio=True)
    got = await sxst.run_pipeline_trio(p)
    assert expected.agrees(got), (p, got, expected)
    assert p.closed == (["source"] if p.source_closed() else [])
