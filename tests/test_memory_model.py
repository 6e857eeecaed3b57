"""The memory model the SLURM requests come from (anchormask.model.memory), against measured peaks: what
`python -m bench --only scale` reports at the real shapes is judged here, on the embedded base."""

import pytest

from bench import scale


@pytest.mark.slow
def test_the_memory_model_predicts_the_embedded_bases_measured_peaks_within_the_tolerance(tmp_path):
    """What `python -m bench --only scale` measures at the real shapes, judged here on the embedded base: each
    phase's peak RSS (a fresh process each) against the model the SLURM requests come from."""
    record, lines = scale.one_shape("embedded", "cpu", 1, tmp_path)
    assert [line.name for line in lines] == ["scale.embedded.load", "scale.embedded.train", "scale.embedded.generate"]
    outside = [line.format() for line in lines if not line.within_tolerance]
    assert outside == [], outside
