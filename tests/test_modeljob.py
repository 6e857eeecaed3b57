"""The model job's set-up: the base block as a typed value, and loading with or without an adapter."""

import select
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


HOLD_A_GPU = """
import sys
from pathlib import Path
from anchormask.model import modeljob
print("claiming", flush=True)
print(modeljob.claim_gpu(2, Path(sys.argv[1]), wait_s=0.05), flush=True)
sys.stdin.readline()  # held until the test says the job is done
"""


def test_jobs_on_one_machine_take_different_gpus_and_a_third_waits_for_one(tmp_path):
    """Two GPUs: two model jobs at once hold one each; a third waits and takes the one the first sets free."""
    def job():  # unbuffered: what select sees on the pipe is all there is
        return subprocess.Popen([sys.executable, "-c", HOLD_A_GPU, str(tmp_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, bufsize=0)

    def line(proc):
        return b"".join(iter(lambda: proc.stdout.read(1), b"\n")).decode()

    def done(proc):
        proc.stdin.write(b"done\n")
        assert proc.wait(timeout=60) == 0

    def claimed(proc):
        assert line(proc) == "claiming"
        return line(proc)

    first, second = job(), job()
    taken = [claimed(first), claimed(second)]
    assert sorted(taken) == ["0", "1"]
    third = job()
    assert line(third) == "claiming"
    assert select.select([third.stdout], [], [], 1.0)[0] == [] and third.poll() is None  # both GPUs held: it waits
    done(first)
    assert line(third) == taken[0]  # the GPU the first job set free
    done(second)
    done(third)


def test_start_puts_the_job_on_the_gpu_it_claims(monkeypatch, tmp_path):
    """A fake two-GPU machine: the runtime is the claimed device, and the provenance records its index."""
    claimed = []
    monkeypatch.setattr(modeljob.bb, "pick_runtime", lambda device: modeljob.bb.Runtime(torch.device("cuda"),
                                                                                        torch.bfloat16))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", claimed.append)
    monkeypatch.setattr(modeljob, "GPU_LOCKS", tmp_path)
    base = modeljob.Base(path="data/base", sha256="0" * 64, trust_remote_code=False, device="auto")
    first, second = modeljob.start(base, 1), modeljob.start(base, 1)
    assert (str(first.device), str(second.device)) == ("cuda:0", "cuda:1") and claimed == [0, 1]
    assert modeljob.bb.runtime_record(second, torch.nn.Linear(1, 1).to(torch.bfloat16)) == "cuda:1+bfloat16"
    for handle in modeljob._HELD:
        handle.close()
    modeljob._HELD.clear()
