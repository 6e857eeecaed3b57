import shutil

import pytest

from anchormask import checksum, verify
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


def test_missing_file_changes_the_hash_and_missing_config_is_named(base_copy):
    expected = checksum.directory_sha256(base_copy)
    (base_copy / "tokenizer.json").unlink()
    with pytest.raises(verify.ChecksumError, match="mismatch"):
        verify.verify_base(str(base_copy), expected)
    (base_copy / "config.json").unlink()
    with pytest.raises(verify.ChecksumError, match="missing config.json"):
        verify.verify_base(str(base_copy), expected)


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


def test_mismatch_names_a_missing_kind_of_file_and_files_no_loader_reads(base_copy):
    expected = checksum.directory_sha256(base_copy)
    (base_copy / "notes.txt").write_text("x")
    (base_copy / "model.safetensors").unlink()
    with pytest.raises(verify.ChecksumError) as err:
        verify.verify_base(str(base_copy), expected)
    message = str(err.value)
    assert "missing: no weights file (*.safetensors or *.bin)" in message
    assert "not a checkpoint file, added to the folder?: notes.txt" in message
    assert "no tokenizer file" not in message
