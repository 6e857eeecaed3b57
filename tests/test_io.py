"""The atomic writer's temporaries: a killed writer's leftover is removed and named, a running one's never."""

import io as text_io
import os
from pathlib import Path

import pytest

from anchormask import fileio
from helpers import kill, removed_line, start_writer

pytestmark = pytest.mark.unit


def killed_writer_leftover(target: Path) -> tuple[Path, int]:
    """(the temporary a writer of ``target`` leaves when it is SIGKILLed mid-write, its pid)."""
    pid = kill(start_writer(target))
    left = sorted(target.parent.glob(f".tmp-{target.name}-*"))
    assert len(left) == 1 and not target.exists(), left
    return left[0], pid


def test_a_temporarys_name_says_which_process_of_which_host_writes_it(tmp_path):
    with fileio.atomic_path(tmp_path / "a.json") as tmp:
        assert tmp.name.startswith(f".tmp-a.json-pid{os.getpid()}@")
    with fileio.atomic_dir(tmp_path / "adapter") as tmp:
        assert tmp.name.startswith(f".tmp-adapter-pid{os.getpid()}@")


def test_the_sweep_removes_a_killed_writers_temporary_and_keeps_a_running_ones(tmp_path):
    figures = tmp_path / "results" / "figures"
    leftover, pid = killed_writer_leftover(figures / "ablation.png")
    running = start_writer(figures / "main.png")
    try:
        log = text_io.StringIO()
        assert fileio.sweep_temporaries(tmp_path / "results", log) == [leftover]
        assert log.getvalue().splitlines() == [removed_line(leftover, figures / "ablation.png", pid)]
        assert not leftover.exists()
        assert len(list(figures.glob(".tmp-main.png-*"))) == 1  # the running writer's is untouched
    finally:
        kill(running)


def test_a_writer_starting_again_removes_what_a_killed_writer_of_its_target_left(tmp_path, capsys):
    target, other = tmp_path / "figures" / "ablation.png", tmp_path / "figures" / "ablation.pdf"
    leftover, pid = killed_writer_leftover(target)
    other_leftover, _ = killed_writer_leftover(other)
    fileio.write_text(target, "whole")
    assert target.read_text() == "whole" and not leftover.exists()
    assert capsys.readouterr().err.splitlines() == [removed_line(leftover, target, pid)]
    assert other_leftover.exists()  # another target's: the DAG-build sweep takes it


def test_temporaries_whose_writer_this_host_cannot_check_are_named_not_removed(tmp_path):
    remote = tmp_path / ".tmp-main.png-pid123@gpu-node-07-abc_1234"
    earlier = tmp_path / ".tmp-ablation.png-k3j2h_g0"  # named before the writer's pid and host were in it
    remote.write_text("")
    earlier.mkdir()
    log = text_io.StringIO()
    assert fileio.sweep_temporaries(tmp_path, log) == []
    assert remote.exists() and earlier.exists()
    assert log.getvalue().splitlines() == [
        f"kept {earlier}: a temporary of an earlier version's writer, whose name does not say which process wrote "
        "it; delete it if no job is writing there",
        f"kept {remote}: a temporary of a writer on host gpu-node-07 (pid 123), which this host cannot check; "
        "delete it if no job is writing there"]


def test_a_safetensors_header_is_read_without_its_tensors_and_a_damaged_one_is_none(tmp_path):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2, 3), "b": torch.ones(4)}, str(path), metadata={"note": "x"})
    length, header = fileio.read_safetensors_header(path)
    assert {k: v["shape"] for k, v in header.items() if k != "__metadata__"} == {"a": [2, 3], "b": [4]}
    assert 8 + length + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__") == \
        path.stat().st_size
    path.write_bytes(path.read_bytes()[:20])  # cut inside the header
    assert fileio.read_safetensors_header(path) is None
    path.write_bytes((2**40).to_bytes(8, "little"))  # a length no header has
    assert fileio.read_safetensors_header(path) is None
