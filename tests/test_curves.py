"""The training curves: every adapter's train_log.tsv drawn, one panel per arm and per sweep strategy; a
continued run drawn once, from its longest adapter; a bad log named with the fix."""

import pytest

from anchormask import fileio, study
from anchormask.reporting import curves
from anchormask.settings import config

pytestmark = pytest.mark.unit


def write_log(folder, steps, loss=lambda s: 5.0 - s / 100):
    folder.mkdir(parents=True)
    lines = ["step\tmask_ratio\tmasked_tokens\tloss\tlr"]
    lines += [f"{s}\t{0.3 + (s % 7) / 20}\t12\t{loss(s)}\t0.001" for s in range(1, steps + 1)]
    (folder / "train_log.tsv").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_the_default_study_draws_every_adapter_a_panel_per_arm_and_sweep_strategy():
    cfg = config.load("config.yaml")
    entries = study.training_curves(cfg)
    assert {e["path"] for e in entries} == {j.path for j in study.trained_adapters(cfg)}
    panels = list(dict.fromkeys(e["panel"] for e in entries))
    assert panels == study.adapter_arms(cfg) + [f"sweep: {s}" for s in cfg["sweep"]["strategies"]]
    drawn = curves.longest_runs(entries)
    sweep = [e for e in drawn if e["panel"].startswith("sweep: ")]
    # one line per (strategy, size): the 1000-step adapter, whose log holds the 100 and 300 steps too
    assert len(sweep) == len(cfg["sweep"]["strategies"]) * len(cfg["sweep"]["sizes"])
    assert {e["steps"] for e in sweep} == {max(cfg["sweep"]["steps"])}


def test_each_line_is_its_adapters_log_and_the_figure_is_byte_stable(tmp_path):
    entries = [
        {"panel": "anchor", "label": "seed 1", "run": "a1", "steps": 40, "path": write_log(tmp_path / "a1", 40)},
        {"panel": "anchor", "label": "seed 2", "run": "a2", "steps": 40,
         "path": write_log(tmp_path / "a2", 40, loss=lambda s: 9.0)},
        {"panel": "sweep: random", "label": "n8", "run": "n8", "steps": 10, "path": write_log(tmp_path / "s10", 10)},
        {"panel": "sweep: random", "label": "n8", "run": "n8", "steps": 30, "path": write_log(tmp_path / "s30", 30)},
    ]
    drawn = curves.longest_runs(entries)
    assert [e["path"] for e in drawn] == [entries[0]["path"], entries[1]["path"], entries[3]["path"]]
    logs = {e["path"]: curves.read_log(e["path"]) for e in drawn}
    fig = curves.curves_figure(drawn, logs)
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in visible] == ["anchor", "sweep: random"]
    raw_lines = visible[0].get_lines()[0::2]  # raw then moving mean, per adapter
    assert list(raw_lines[0].get_ydata()) == list(logs[entries[0]["path"]]["loss"])
    assert set(raw_lines[1].get_ydata()) == {9.0}
    assert len(visible[1].get_lines()[0].get_xdata()) == 30
    curves.training_figure(entries, tmp_path / "t1.pdf", tmp_path / "t1.png")
    curves.training_figure(entries, tmp_path / "t2.pdf", tmp_path / "t2.png")
    assert (tmp_path / "t1.png").read_bytes() == (tmp_path / "t2.png").read_bytes()
    assert (tmp_path / "t1.pdf").read_bytes() == (tmp_path / "t2.pdf").read_bytes()


def test_a_log_without_the_loss_column_is_named_with_the_fix(tmp_path):
    folder = tmp_path / "anchor_full_n8_s4_seed1"
    folder.mkdir()
    (folder / "train_log.tsv").write_text("step\tmask_ratio\n1\t0.5\n")
    entry = {"panel": "anchor", "label": "seed 1", "run": "r", "steps": 4, "path": str(folder)}
    with pytest.raises(fileio.InputError) as err:
        curves.training_figure([entry], tmp_path / "t.pdf", tmp_path / "t.png")
    assert str(err.value).startswith(f"{folder}/train_log.tsv: the training log lacks loss")
    assert f"snakemake --cores 1 --forcerun {folder} " in str(err.value)
    assert not (tmp_path / "t.png").exists()
