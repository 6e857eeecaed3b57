"""The model job's set-up: the base block as a typed value, and loading with or without an adapter."""

import pytest
import torch

from anchormask import modeljob, schemas
from helpers import cpu_base

pytestmark = pytest.mark.unit


def test_a_base_block_without_the_optional_keys_takes_the_schemas_defaults():
    base = modeljob.Base.from_config({"path": "data/base", "sha256": "a" * 64})
    assert base.device == schemas.default(("base", "device"))
    assert base.trust_remote_code == schemas.default(("base", "trust_remote_code"))
    assert (base.family, base.projections, base.layout) == (None, None, None)


def test_a_base_block_keeps_every_key_it_sets():
    block = {"path": "/m", "sha256": "b" * 64, "trust_remote_code": True, "device": "cuda", "family": "llada",
             "projections": {"q": "q", "k": "k", "v": "v", "o": "o"}, "layout": "chat"}
    base = modeljob.Base.from_config(block)
    assert {k: getattr(base, k) for k in block} == block


def test_start_sets_threads_and_deterministic_mode():
    before, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        runtime = modeljob.start(cpu_base("unused"), threads=1)
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
        assert runtime.device.type == "cpu"
    finally:
        torch.set_num_threads(before)
        torch.use_deterministic_algorithms(deterministic, warn_only=True)


def test_load_merges_the_adapter_into_the_base(tiny_model_dir, trained_adapter):
    runtime = modeljob.start(cpu_base(tiny_model_dir), threads=1)
    plain, adapted = (modeljob.load(cpu_base(tiny_model_dir), runtime, a) for a in (None, str(trained_adapter)))
    assert not plain.model.training and not adapted.model.training
    names = [n for n, _ in plain.model.named_parameters()]
    assert names == [n for n, _ in adapted.model.named_parameters()]  # merged: no LoRA modules left
    changed = [n for (n, p), (_, q) in zip(plain.model.named_parameters(), adapted.model.named_parameters())
               if not torch.equal(p, q)]
    assert changed and all("attention" in n for n in changed)
