"""provenance.versions(): the package versions, the CPU model and, on a GPU, the device's name."""

from __future__ import annotations

import sys
import types

import pytest

from anchormask.repro import provenance

pytestmark = pytest.mark.unit


def test_cpu_model_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert provenance.cpu_model(info) == "AMD EPYC 7B13"


def test_cpu_model_falls_back_to_platform_without_cpuinfo(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance.platform, "processor", lambda: "")
    monkeypatch.setattr(provenance.platform, "machine", lambda: "aarch64")
    assert provenance.cpu_model(tmp_path / "missing") == "aarch64"
    (tmp_path / "arm").write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # no model name line
    assert provenance.cpu_model(tmp_path / "arm") == "aarch64"


def _fake_torch(available: bool) -> types.ModuleType:
    """Two GPUs, the job on the second (modeljob.start sets the current device where it claims one)."""
    cuda = types.SimpleNamespace(is_available=lambda: available, get_device_name=lambda i: f"NVIDIA H200 #{i}",
                                 current_device=lambda: 1)
    return types.SimpleNamespace(cuda=cuda)


@pytest.mark.parametrize("available, expected", [(True, "NVIDIA H200 #1"), (False, None)])
def test_gpu_name_where_torch_sees_a_gpu(monkeypatch, available, expected):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(available))
    assert provenance.gpu_name() == expected


def test_gpu_name_does_not_import_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert provenance.gpu_name() is None
    assert "torch" not in sys.modules


def test_versions_carry_the_cpu_model_and_the_gpu(monkeypatch):
    monkeypatch.setattr(provenance, "cpu_model", lambda: "Intel(R) Xeon(R) CPU @ 2.20GHz")
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True))
    provenance.versions.cache_clear()
    try:
        found = provenance.versions()
        assert found["cpu"] == "Intel(R) Xeon(R) CPU @ 2.20GHz" and found["gpu"] == "NVIDIA H200 #1"
        assert set(provenance.PACKAGES) <= set(found)
        monkeypatch.setitem(sys.modules, "torch", _fake_torch(False))
        provenance.versions.cache_clear()
        assert "gpu" not in provenance.versions()
    finally:
        provenance.versions.cache_clear()
