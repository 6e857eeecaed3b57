"""The actual pretraining text holds no study text (slow: it is built in full from the installed
dictionaries). The leak rule itself, fast: tests/test_pretrain_text.py."""

from pathlib import Path

import pytest

from anchormask.embedded_base import pretrain_text as pt
from helpers import REPO

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not (Path("/usr/share/dictd/gcide.dict.dz").exists() and Path("/usr/share/wordnet").exists()),
                    reason="needs Debian's wordnet-base and dict-gcide (.ci/run installs them)")
def test_the_actual_pretraining_text_holds_no_study_text():
    """Built from the installed packages as rule pretrain_text builds it, checked by plain search."""
    import yaml

    spec = yaml.safe_load((REPO / "workflow" / "pretrain.yaml").read_text())
    study = sorted((REPO / "data").glob("corpora/*.jsonl")) + sorted((REPO / "data").glob("queries*/*.jsonl"))
    study.append(REPO / "data" / "train" / "pairs.jsonl")
    text = pt.build_text(sources=spec["sources"], study_files=study, seed=spec["settings"]["seed"],
                         validation_per_mille=spec["validation_per_mille"])
    assert text["counts"]["gcide"]["words"] > 2_000_000 and text["counts"]["wordnet"]["words"] > 1_500_000
    haystack = " " + " ".join(pt.lowercase_alnum_words(line) for line in text["train"] + text["validation"]) + " "
    texts = pt.study_texts(study)
    assert len(texts) > 500
    for study_text in texts:
        assert f" {pt.lowercase_alnum_words(study_text)} " not in haystack, study_text
