import json
import shutil

import pytest

from anchormask import checksum
from anchormask.model import verify
from helpers import REPO

pytestmark = pytest.mark.unit


@pytest.fixture()
def base_copy(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "base")


def test_matching_base_gives_the_same_record_bytes_twice(base_copy, tmp_path):
    expected = checksum.directory_sha256(base_copy)
    verify.write_verified(str(base_copy), expected, str(tmp_path / "v1.json"))
    verify.write_verified(str(base_copy), expected, str(tmp_path / "v2.json"))
    assert (tmp_path / "v1.json").read_bytes() == (tmp_path / "v2.json").read_bytes()
    record = verify.verify_base(str(base_copy), expected)
    assert set(record["files"]) == {p.name for p in base_copy.iterdir()}


def test_changed_weight_file_fails_with_expected_actual_and_fix(base_copy, tmp_path):
    expected = checksum.directory_sha256(base_copy)
    weights = base_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(verify.ChecksumError) as err:
        verify.write_verified(str(base_copy), expected, str(tmp_path / "v.json"))
    message = str(err.value)
    assert expected in message and checksum.directory_sha256(base_copy) in message
    assert "base.sha256" in message and "model.safetensors" in message
    assert not (tmp_path / "v.json").exists()


@pytest.mark.parametrize("damage, said", [
    (lambda b: b[:-100], "bytes, but its header names"),
    (lambda b: b + b"\0", "bytes, but its header names"),
    (lambda b: b[:5], "5 bytes, shorter than its safetensors header says"),
    (lambda b: b[:8] + b"{not json" + b[17:], "its safetensors header is not JSON"),
])
def test_a_truncated_weights_file_that_was_hashed_again_is_named_before_the_hash(base_copy, tmp_path, damage, said):
    weights = base_copy / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(verify.ChecksumError) as err:  # its new hash pinned: only the framing check can tell
        verify.write_verified(str(base_copy), checksum.directory_sha256(base_copy), str(tmp_path / "v.json"))
    assert "model.safetensors: " in str(err.value) and said in str(err.value), str(err.value)
    assert "a hash taken of the damaged file does not make it whole" in str(err.value)
    assert not (tmp_path / "v.json").exists()


def test_missing_tokenizer_is_named_before_the_hash_is_compared(base_copy):
    expected = checksum.directory_sha256(base_copy)
    (base_copy / "tokenizer.json").unlink()
    with pytest.raises(verify.ChecksumError) as err:
        verify.verify_base(str(base_copy), expected)
    message = str(err.value)
    assert "lacks files its loader needs" in message and "mismatch" not in message
    assert "missing tokenizer: tokenizer.json, or vocab.txt for the slow BertTokenizer" in message
    assert "base.path" in message and "Restore them" in message
    (base_copy / "config.json").unlink()
    with pytest.raises(verify.ChecksumError, match="missing config.json"):
        verify.verify_base(str(base_copy), expected)


def test_a_slow_tokenizers_vocabulary_stands_in_for_tokenizer_json(base_copy):
    import json

    vocab = json.loads((base_copy / "tokenizer.json").read_text())["model"]["vocab"]
    (base_copy / "vocab.txt").write_text("".join(f"{word}\n" for word in sorted(vocab, key=vocab.get)))
    (base_copy / "tokenizer.json").unlink()
    assert verify.missing_files(base_copy) == []


def test_code_that_auto_map_names_or_imports_is_required(base_copy):
    import json

    config = json.loads((base_copy / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel",
                          "AutoModelForCausalLM": "other/repo--modeling_y.YModel"}
    (base_copy / "config.json").write_text(json.dumps(config))
    (base_copy / "modeling_x.py").write_text("from .configuration_x import XConfig\nfrom .generation_utils import G\n")
    assert verify.missing_files(base_copy) == ["code: configuration_x.py (auto_map or a relative import names it)",
                                               "code: generation_utils.py (auto_map or a relative import names it)"]


def test_shards_of_a_weight_index_are_required(base_copy):
    import json

    (base_copy / "model.safetensors").rename(base_copy / "model-00001-of-00002.safetensors")
    (base_copy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert verify.missing_files(base_copy) == [
        "weights: model-00002-of-00002.safetensors (a shard that model.safetensors.index.json names)"]


def test_manifest_covers_names_and_contents_but_not_readme_or_hidden_files(base_copy):
    before = checksum.directory_sha256(base_copy)
    (base_copy / "README.md").write_text("notes")
    (base_copy / ".cache").write_text("x")
    assert checksum.directory_sha256(base_copy) == before
    (base_copy / "config.json").rename(base_copy / "config2.json")
    assert checksum.directory_sha256(base_copy) != before


def test_shipped_base_matches_the_pinned_hash():
    import yaml

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    assert checksum.directory_sha256(REPO / cfg["base"]["path"]) == cfg["base"]["sha256"]


def test_missing_weights_are_named_and_a_mismatch_names_files_no_loader_reads(base_copy):
    expected = checksum.directory_sha256(base_copy)
    (base_copy / "notes.txt").write_text("x")
    with pytest.raises(verify.ChecksumError) as err:
        verify.verify_base(str(base_copy), expected)
    message = str(err.value)
    assert "mismatch" in message and "not a checkpoint file, added to the folder?: notes.txt" in message
    (base_copy / "model.safetensors").unlink()
    with pytest.raises(verify.ChecksumError) as err:
        verify.verify_base(str(base_copy), expected)
    message = str(err.value)
    assert "missing weights: no *.safetensors or *.bin file" in message and "mismatch" not in message
    assert "tokenizer" not in message


def test_a_mismatch_names_the_key_and_file_that_set_the_hash(base_copy, monkeypatch):
    where = {"path": "bases.early.base.path in study.yaml", "sha256": "bases.early.base.sha256 in study.yaml"}
    monkeypatch.setenv(verify.KEYS_ENV, json.dumps({"results/bases/early/base/verified.json": where}))
    keys = verify.keys_from_environment("results/bases/early/base/verified.json")
    assert keys == where
    with pytest.raises(verify.ChecksumError) as err:
        verify.verify_base(str(base_copy), "0" * 64, keys)
    assert "mismatch for bases.early.base.sha256 in study.yaml" in str(err.value)
    assert "put the actual hash in bases.early.base.sha256 in study.yaml" in str(err.value)
    assert "config.yaml" not in str(err.value)
    # an output the workflow did not announce: config.yaml's keys
    assert verify.keys_from_environment("results/base/verified.json")["sha256"] == "base.sha256 in config.yaml"
