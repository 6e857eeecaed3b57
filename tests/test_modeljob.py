"""The model job's set-up: the base block as a typed value, and loading with or without an adapter."""

import subprocess
import sys

import pytest
import torch

from anchormask import schemas
from anchormask.model import modeljob
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


def test_finish_exits_zero_and_loses_no_buffered_line(tmp_path):
    # stdout is a pipe here, so print() is block-buffered: without the flush the line would be lost.
    log = tmp_path / "job.log"
    script = ("import atexit, logging\n"
              "from anchormask.model import modeljob\nfrom anchormask.repro import runlog\n"
              f"runlog.log_to({str(log)!r})\n"
              "atexit.register(print, 'teardown ran')\n"
              "logging.getLogger('anchormask').info('last log line')\n"
              "print('last stdout line')\n"
              "modeljob.finish()\n"
              "print('after finish')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "last stdout line\n"  # nothing after finish(), and no interpreter teardown
    assert "last log line" in log.read_text() and "last log line" in proc.stderr


def test_the_heap_settings_take_where_the_c_library_is_glibc():
    import platform

    assert modeljob.keep_freed_memory() is (platform.libc_ver()[0] == "glibc")
