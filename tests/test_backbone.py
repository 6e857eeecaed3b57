import pytest
import torch
from torch import nn

from anchormask.model import backbone as bb
from anchormask.model import families
from helpers import REPO

pytestmark = pytest.mark.unit


def test_tiny_bert_is_detected_and_its_projections_named(tiny_backbone):
    tiny, _ = tiny_backbone
    assert tiny.family.name == "bert" and tiny.mask_token_id == tiny.tokenizer.mask_token_id
    assert len(tiny.projection_modules("full")) == 8
    assert all(n.endswith(("value", "output.dense")) for n in tiny.projection_modules("vo"))
    assert len(tiny.projection_modules("qk")) == 4


def test_split_head_gives_the_same_logits_as_the_full_model(tiny_backbone):
    tiny, _ = tiny_backbone
    ids = torch.tensor([[2, 10, 11, 4, 4, 3]])
    attention = torch.ones_like(ids)
    with torch.no_grad():
        full = tiny.model(input_ids=ids, attention_mask=attention).logits
        split = tiny.logits(ids, attention)
    assert torch.allclose(full, split, atol=1e-6)


class FusedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(4, 12)
        self.o_proj = nn.Linear(4, 4)


class LladaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        for name in ("q_proj", "k_proj", "v_proj", "attn_out"):
            setattr(self, name, nn.Linear(4, 4))


def test_family_detection_refuses_fused_qkv_and_knows_llada():
    with pytest.raises(families.FamilyError, match="fused QKV"):
        families.detect(nn.Sequential(FusedAttention()))
    assert families.detect(nn.Sequential(LladaBlock(), LladaBlock())).name == "llada"
    with pytest.raises(families.FamilyError, match="base.projections"):
        families.detect(nn.Sequential(nn.Linear(2, 2)))


def test_cpu_runtime_is_float32_without_autocast():
    runtime = bb.pick_runtime("cpu")
    assert runtime.device.type == "cpu" and runtime.autocast_dtype is None and runtime.name == "cpu+float32"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(bb.BackboneError, match="no GPU"):
        bb.pick_runtime("cuda")


def test_directory_without_config_is_named(tmp_path):
    with pytest.raises(bb.BackboneError, match="no config.json"):
        bb.load_backbone(tmp_path)


def test_shipped_base_loads_with_the_auto_classes():
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(REPO / "data" / "base")
    tokenizer = AutoTokenizer.from_pretrained(REPO / "data" / "base")
    assert tokenizer.mask_token_id is not None
    assert 1_000_000 < sum(p.numel() for p in model.parameters()) < 10_000_000
    assert families.detect(model).name == "bert"


def test_another_architecture_loads_with_its_own_head(tmp_path):
    from transformers import RobertaConfig, RobertaForMaskedLM

    from helpers import build_tiny_model

    tok_dir = build_tiny_model(tmp_path / "bert")
    config = RobertaConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=40, pad_token_id=0)
    RobertaForMaskedLM(config).save_pretrained(tmp_path / "roberta")
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(tmp_path / "roberta")
    loaded = bb.load_backbone(tmp_path / "roberta", runtime=bb.pick_runtime("cpu"))
    assert loaded.head == ("lm_head",) and len(loaded.projection_modules("vo")) == 2
    ids = torch.tensor([[2, 10, 4, 3]])
    with torch.no_grad():
        assert torch.allclose(loaded.logits(ids, torch.ones_like(ids)), loaded.model(input_ids=ids).logits, atol=1e-6)
