"""What every job that runs the base model sets up first: the base as configured, torch's threads and
deterministic mode, the runtime ``base.device`` asks for, and the model with one adapter merged;
and what it does last (``finish``).

Training, generation, the attention probe and the base evaluation all start here, so a job that
loads the model cannot differ from the others in how it does.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from anchormask import schemas
from anchormask.model import backbone as bb
from anchormask.model.adapters import verify as verify_adapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Base:
    """The config's ``base`` block (src/anchormask/schemas/config.schema.yaml describes each field)."""

    path: str
    sha256: str
    trust_remote_code: bool
    device: str
    family: str | None = None
    projections: Mapping[str, str] | None = None
    layout: str | None = None

    @classmethod
    def from_config(cls, block: Mapping[str, Any]) -> Base:
        """From the config's ``base`` block (or the record a rule passes in its params); a key the block
        does not set takes the schema's default."""
        section = {"base": dict(block)}
        return cls(path=str(block["path"]), sha256=block["sha256"],
                   trust_remote_code=schemas.setting(section, ("base", "trust_remote_code")),
                   device=schemas.setting(section, ("base", "device")), family=block.get("family"),
                   projections=block.get("projections"), layout=block.get("layout"))


def start(base: Base, threads: int) -> bb.Runtime:
    """Torch's threads and deterministic kernels for this job; the runtime ``base.device`` asks for, on a
    GPU of its own where the machine has several (``claim_gpu``)."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    keep_freed_memory()
    runtime = bb.pick_runtime(base.device)
    count = torch.cuda.device_count() if runtime.device.type == "cuda" else 0
    if count > 1:
        index = claim_gpu(count, GPU_LOCKS)
        torch.cuda.set_device(index)
        runtime = bb.Runtime(torch.device("cuda", index), runtime.autocast_dtype)
        log.info("runtime: GPU %d of the %d this job sees (the others held by other jobs or free)", index, count)
    return runtime


# Snakemake assigns no GPU to a local job: with several on one machine, each model job takes the first
# one no other job of this user holds, by an exclusive lock on one file per GPU, released when the job
# ends (even when it is killed). SLURM gives each job its own GPU (CUDA_VISIBLE_DEVICES): one device seen.
GPU_LOCKS = Path(tempfile.gettempdir()) / f"anchormask-gpus-{os.getuid()}"
GPU_WAIT_S = 5.0
_HELD: list[Any] = []  # the open lock files: held for the job's lifetime


def claim_gpu(count: int, lock_dir: Path, wait_s: float = GPU_WAIT_S) -> int:
    """The index of a GPU no other job holds, held by this process from now on; waits while all are held."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for index in range(count):
            handle = open(lock_dir / f"gpu{index}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            _HELD.append(handle)
            return index
        if not waited:
            log.info("all %d GPUs are held by other jobs (%s); waiting for one", count, lock_dir)
            waited = True
        time.sleep(wait_s)


# glibc's mallopt parameters (malloc.h) and the values this job sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_HEAP_SETTINGS = ((_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 256 << 20))


def keep_freed_memory() -> bool:
    """Let glibc's malloc keep the memory a job frees, for the next allocation of the same size.

    A denoising step allocates and frees the same activations (tens of MB) again and again. By
    default each one is a fresh mapping that the kernel hands out page by page and takes back
    when it is freed: a generation job of the main study took 500,000 page faults and ran 7-10%
    slower than with these settings (same tokens). Allocations of 32 MiB and more (model weights)
    are still mapped and unmapped as before. False where the C library is not glibc.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return all(mallopt(param, value) == 1 for param, value in _HEAP_SETTINGS)


def load(base: Base, runtime: bb.Runtime, adapter: str | None = None, *,
         attn_implementation: str | None = None) -> bb.Backbone:
    """The base in eval mode, with one adapter merged into its weights (none: the base itself).

    The adapter's files are checked against the hashes it was saved with before it is used.
    """
    backbone = bb.load_backbone(base.path, trust_remote_code=base.trust_remote_code, runtime=runtime,
                                attn_implementation=attn_implementation, family=base.family,
                                projections=base.projections, layout=base.layout)
    if adapter is not None:
        from peft import PeftModel

        verify_adapter(adapter)  # a flipped byte or a truncated file is named here, not used
        backbone.model = PeftModel.from_pretrained(backbone.model, adapter).merge_and_unload()
    backbone.model.eval()
    return backbone


def finish() -> NoReturn:
    """End a model job whose outputs are written: flush the log and the streams, then leave at once.

    The interpreter's own exit tears down the ~3,000 modules torch and transformers import, about a
    second in each model job of the main job (41 of them), for nothing: every output is already in
    place (written to a temporary name and renamed), so only the buffered log lines can be lost, and
    they are flushed here. A job that fails raises before this and exits as usual, with its traceback.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
