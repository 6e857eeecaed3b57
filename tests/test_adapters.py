"""Adapter integrity: hashes recorded at training time, checked wherever an adapter is used."""

import json
import shutil

import pytest

from anchormask.checksum import file_sha256
from anchormask.fileio import InputError
from anchormask.model import adapters, modeljob
from anchormask.model import backbone as bb
from anchormask.probes import lora
from helpers import cpu_base, flip_one_byte

pytestmark = pytest.mark.unit

WEIGHTS = "adapter_model.safetensors"


@pytest.fixture
def adapter(trained_adapter, tmp_path):
    return shutil.copytree(trained_adapter, tmp_path / "results" / "adapters" / trained_adapter.name)


def test_training_records_the_hash_of_the_files_peft_loads(trained_adapter):
    record = json.loads((trained_adapter / "provenance.json").read_text())
    assert record["files"] == {name: file_sha256(trained_adapter / name) for name in adapters.HASHED_FILES}
    assert adapters.problems(trained_adapter) == []
    assert adapters.verify(trained_adapter)["job"]["id"] == trained_adapter.name


@pytest.mark.parametrize("damage,expected", [
    (lambda a: flip_one_byte(a / WEIGHTS), "adapter_model.safetensors .* altered or truncated"),
    (lambda a: (a / WEIGHTS).write_bytes((a / WEIGHTS).read_bytes()[:100]),
     r"adapter_model.safetensors \(100 bytes\) .* altered or truncated"),
    (lambda a: (a / WEIGHTS).unlink(), "adapter_model.safetensors is missing"),
    (lambda a: (a / "provenance.json").unlink(), "provenance.json is missing"),
])
def test_a_damaged_adapter_gives_one_message_with_its_path_and_a_rebuild_command(adapter, damage, expected):
    damage(adapter)
    with pytest.raises(InputError, match=expected) as err:
        adapters.verify(adapter)
    message = str(err.value)
    assert message.startswith(f"adapter {adapter.as_posix()}: ")
    assert f"snakemake --cores 1 --forcerun {adapter.as_posix()}" in message


def test_an_adapter_name_that_does_not_exist_is_answered_with_the_nearest_names(adapter):
    typo = adapter.parent / adapter.name.replace("seed", "sed")
    with pytest.raises(InputError) as err:
        adapters.verify(typo)
    message = str(err.value)
    assert message.startswith(f"adapter {typo.as_posix()}: no adapter folder of that name exists; the nearest in "
                              f"{adapter.parent.as_posix()}/: {adapter.name}")
    assert "--forcerun" not in message and f"snakemake --cores 1 {typo.as_posix()}" in message
    assert adapters.problems(typo) == ["the adapter folder is missing"]  # the audit's word for a deleted one


def test_generation_refuses_a_flipped_byte_before_loading(adapter, tiny_model_dir):
    flip_one_byte(adapter / WEIGHTS)
    with pytest.raises(InputError, match=f"adapter {adapter.as_posix()}: adapter_model.safetensors"):
        modeljob.load(cpu_base(tiny_model_dir), bb.pick_runtime("cpu"), str(adapter))


def test_generation_refuses_a_truncated_file_without_a_safetensors_traceback(adapter, tiny_model_dir):
    (adapter / WEIGHTS).write_bytes(b"")
    with pytest.raises(InputError, match="altered or truncated"):
        modeljob.load(cpu_base(tiny_model_dir), bb.pick_runtime("cpu"), str(adapter))


def test_lora_probe_refuses_an_altered_adapter(adapter):
    flip_one_byte(adapter / WEIGHTS)
    with pytest.raises(InputError, match="altered or truncated"):
        lora.lora_layers_table([{"arm": "anchor", "strategy": "anchor", "targets": "full", "path": str(adapter)}])


def test_an_adapter_without_recorded_hashes_is_named(adapter):
    record = json.loads((adapter / "provenance.json").read_text())
    del record["files"]
    (adapter / "provenance.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="records no file hashes"):
        adapters.verify(adapter)
