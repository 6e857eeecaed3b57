"""Outputs an earlier configuration left under results/: named (a folder that holds nothing current once),
never the logs, benchmarks, benchmark results or the shipped files; at the end of a run and by the audit."""

from types import SimpleNamespace

import pytest

from anchormask.settings import leftovers

pytestmark = pytest.mark.unit


def plant(root, *paths):
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x\n")


def test_what_the_dag_does_not_produce_is_named_once_per_file_or_folder(tmp_path):
    plant(tmp_path, "results/tables/headline.md", "results/tables/bases.md", "results/adapters/a/weights.bin",
          "results/adapters/a/train_log.tsv", "results/adapters/old/weights.bin",
          "results/bases/first/tables/headline.md", "results/bases/first/figures/main.png",
          "results/logs/old.log", "results/bases/first/benchmarks/x.tsv", "results/bench/memory.json",
          "results/published/headline.md", "results/README.md", "results/tables/.tmp-headline-x")
    produced = ["results/tables/bases.md", "results/adapters/a", "results/logs/new.log", "results/tables/missing.md"]
    assert leftovers.leftovers(produced, "results", tmp_path) == [
        "results/adapters/old/", "results/bases/", "results/tables/headline.md"]
    assert leftovers.leftovers(["results/bases/first/tables/headline.md"], "results", tmp_path)[:2] == [
        "results/adapters/", "results/bases/first/figures/"]


def test_the_end_of_a_run_speaks_only_for_the_default_target(tmp_path, monkeypatch):
    plant(tmp_path, "results/tables/headline.md", "results/tables/old.md")
    monkeypatch.chdir(tmp_path)
    job = SimpleNamespace(output=["results/tables/headline.md"], log=["results/logs/h.log"], benchmark=None)
    said = leftovers.after_run([job], targets=[])
    assert said.startswith("1 output(s) under results/ that the current configuration does not produce")
    assert said.endswith("\n  results/tables/old.md\n")
    assert leftovers.after_run([job], targets=["results/tables/headline.md"]) == ""
    (tmp_path / "results/tables/old.md").unlink()
    assert leftovers.after_run([job], targets=[]) == ""
