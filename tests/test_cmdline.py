"""Command lines Snakemake misreads: a dotted --config key, a missing --configfile, a target after
--configfile. `anchormask run` names each with the corrected command; the Snakefile catches the one it sees."""

import shlex
import subprocess
import sys

import pytest

from anchormask import cli, fileio
from anchormask.settings import command_line
from helpers import copy_repo, snakemake


def fixed_command(message: str) -> list[str]:
    """The corrected command a message ends with, as arguments for snakemake."""
    return shlex.split(message[message.rindex(": snakemake ") + len(": snakemake "):])


@pytest.mark.unit
def test_a_dotted_config_key_gets_the_nested_mapping_that_works():
    [message] = command_line.problems(["--cores", "2", "--config", "train.lr=0.002", "generation.steps=8",
                                  "train.overrides.anchor.rank=4", "sweep={sizes: [72]}"])
    assert message.startswith("--config train.lr=0.002 generation.steps=8 train.overrides.anchor.rank=4: a dotted key")
    assert "--configfile=FILE" in message and "Config entry must start with a valid identifier" in message
    assert fixed_command(message) == ["--cores", "2", "--config", "train={lr: 0.002, overrides: {anchor: {rank: 4}}}",
                                      "generation={steps: 8}", "sweep={sizes: [72]}"]


@pytest.mark.unit
def test_a_missing_config_file_is_named_with_where_it_was_looked_for(tmp_path):
    [message] = command_line.problems(["-n", "--configfile", "tests/configs/nonexistent.yaml"], cwd=tmp_path)
    assert message.startswith("--configfile tests/configs/nonexistent.yaml: file not found")
    assert str(tmp_path.resolve()) in message and "--configfile=config/seeds3.yaml" in message


@pytest.mark.unit
def test_a_target_after_configfile_gets_the_command_with_the_equals_sign(tmp_path):
    (tmp_path / "tiny.yaml").write_text("train: {rank: 8}\n")
    [message] = command_line.problems(["--configfile", "tiny.yaml", "results/base/verified.json", "--cores", "2"],
                                 cwd=tmp_path)
    assert "results/base/verified.json would be read as a config file" in message
    assert fixed_command(message) == ["--configfile=tiny.yaml", "--cores", "2", "results/base/verified.json"]
    # a rule name is no path: it is a missing config file, with the same fix offered
    [message] = command_line.problems(["--configfile", "tiny.yaml", "pretrain_base"], cwd=tmp_path)
    assert "--configfile pretrain_base: file not found" in message
    assert "if pretrain_base is a target (a rule name), write --configfile=tiny.yaml before it" in message


@pytest.mark.unit
def test_a_config_file_after_configfile_with_equals_is_named_as_read_as_a_target(tmp_path):
    for name in ("shipped.yaml", "mine.yaml"):
        (tmp_path / name).write_text("train: {rank: 8}\n")
    argv = ["-n", "--configfile=shipped.yaml", "mine.yaml", "results/tables/headline.md", "--cores", "2"]
    [message] = command_line.problems(argv, cwd=tmp_path)
    assert message.startswith("mine.yaml is read as a target, not a config file: list it after --configfile "
                              "without '=' (--configfile shipped.yaml mine.yaml)")
    with pytest.raises(fileio.InputError, match="^mine.yaml is read as a target"):
        command_line.check_configfiles([tmp_path / "shipped.yaml"], argv, cwd=tmp_path)
    # without `=` the option takes both files: nothing to say
    assert command_line.problems(["-n", "--configfile", "shipped.yaml", "mine.yaml"], cwd=tmp_path) == []


@pytest.mark.unit
def test_a_repeated_configfile_is_refused_since_snakemake_keeps_the_last_only(tmp_path):
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text("train: {rank: 8}\n")
    argv = ["-n", "--configfile=a.yaml", "--configfile", "b.yaml", "c.yaml", "--cores", "2"]
    assert command_line.problems(argv, cwd=tmp_path) == [
        "--configfile is given 2 times, and Snakemake keeps only the last one: a.yaml would be dropped without a "
        "word. List every file after one --configfile, in the order they layer: --configfile a.yaml b.yaml c.yaml"]
    with pytest.raises(fileio.InputError, match="keeps only the last one"):
        command_line.check_configfiles([tmp_path / "b.yaml", tmp_path / "c.yaml"], argv, cwd=tmp_path)
    # several files and a target after them: one option, the target after `--`
    [message] = command_line.problems(["--configfile", "a.yaml", "b.yaml", "results/tables/headline.md"], tmp_path)
    assert message.endswith("snakemake --configfile a.yaml b.yaml -- results/tables/headline.md")


@pytest.mark.unit
def test_a_target_after_config_is_moved_behind_the_double_dash():
    [message] = command_line.problems(["-n", "--config", "train={rank: 8}", "results/tables/headline.md"])
    assert "results/tables/headline.md is not one" in message
    assert fixed_command(message) == ["-n", "--config", "train={rank: 8}", "--", "results/tables/headline.md"]


@pytest.mark.unit
@pytest.mark.parametrize("argv", [
    ["--cores", "2", "--configfile=config/seeds3.yaml", "results/tables/headline.md"],
    ["--configfile", "config/seeds3.yaml", "tests/configs/tiny.yaml", "--cores", "2"],
    ["-n", "--config", "train={rank: 8}", "generation={steps: 8}", "--", "results/figures/sweep.pdf"],
    ["-n", "results/figures/sweep.pdf", "--", "--configfile", "anything"],
])
def test_command_lines_that_say_what_they_mean_pass(argv):
    from helpers import REPO

    assert command_line.problems(argv, cwd=REPO) == []


@pytest.mark.unit
def test_the_workflow_refuses_a_target_it_was_given_as_config_file(tmp_path):
    with pytest.raises(fileio.InputError) as err:
        command_line.check_configfiles([tmp_path / "tiny.yaml", tmp_path / "results/base/verified.json"], cwd=tmp_path)
    assert str(err.value).startswith("--configfile results/base/verified.json: read as a config file, but it is a "
                                     "target")
    assert "snakemake --configfile=tiny.yaml results/base/verified.json" in str(err.value)
    command_line.check_configfiles([tmp_path / "tiny.yaml", tmp_path / "config/seeds3.yaml"], cwd=tmp_path)


@pytest.mark.unit
def test_anchormask_run_stops_before_snakemake_on_a_bad_command_line(capsys):
    assert cli.main(["run", "-n", "--config", "train.lr=0.002"]) == 2
    err = capsys.readouterr().err
    assert "nothing was run" in err and "snakemake -n --config 'train={lr: 0.002}'" in err


@pytest.mark.workflow
def test_snakemake_refuses_the_dotted_key_and_accepts_the_suggested_fix(repo_copy):
    proc = snakemake(repo_copy, "-n", "--config", "train.lr=0.002", "results/base/verified.json", check=False)
    assert proc.returncode != 0 and "Config entry must start with a valid identifier" in proc.stdout + proc.stderr
    [message] = command_line.problems(["-n", "--config", "train.lr=0.002", "--",
                                       "results/adapters/anchor_full_n144_s300_seed42"])
    proc = snakemake(repo_copy, *fixed_command(message))
    assert "rule train_adapter:" in proc.stdout + proc.stderr


@pytest.mark.workflow
def test_anchormask_run_runs_snakemake_when_the_command_line_is_right(repo_copy):
    run = [sys.executable, "-m", "anchormask.cli", "run", "-n"]
    good = subprocess.run([*run, "--configfile=tests/configs/tiny.yaml", "results/base/verified.json"], cwd=repo_copy,
                          capture_output=True, text=True, timeout=300)
    assert good.returncode == 0 and "verify_base" in good.stdout + good.stderr
    bad = subprocess.run([*run, "--configfile", "tests/configs/nonexistent.yaml"], cwd=repo_copy, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "--configfile tests/configs/nonexistent.yaml: file not found" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.workflow
def test_the_snakefile_names_an_existing_target_read_as_config_file(tmp_path):
    repo = copy_repo(tmp_path)
    (repo / "results" / "base").mkdir(parents=True)
    (repo / "results" / "base" / "verified.json").write_text('{"path": "data/base", "sha256": "0"}\n')
    proc = snakemake(repo, "-n", "--configfile", "tests/configs/tiny.yaml", "results/base/verified.json", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "--configfile results/base/verified.json: read as a config file" in out
    assert "snakemake --configfile=tests/configs/tiny.yaml results/base/verified.json" in out
    assert "Additional properties" not in out and "unknown" not in out  # not blamed on the config's keys
    assert 'File "' not in out  # the message stands alone, without the frames it passed through


@pytest.mark.workflow
def test_the_snakefile_names_a_config_file_that_follows_configfile_with_equals(tmp_path):
    repo = copy_repo(tmp_path)
    (repo / "my-llada.yaml").write_text("base: {path: data/base}\n")
    proc = snakemake(repo, "-n", "--configfile=config/bases/llada-8b-instruct.yaml", "my-llada.yaml", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "my-llada.yaml is read as a target, not a config file: list it after --configfile without '=' " \
           "(--configfile config/bases/llada-8b-instruct.yaml my-llada.yaml" in out
    assert "SET-ME" not in out and 'File "' not in out  # not blamed on the shipped layer's placeholder path


@pytest.mark.unit
@pytest.mark.parametrize("content, said", [
    (b"- {train: {rank: 8}}\n", "its top level is a YAML list, but a config file is a mapping of the config's "
                                "top-level keys"),
    (b"train:\n  rank: 8\n  note: caf\xe9\n", "line 3: not UTF-8 text (byte 0xe9 at offset 28); save the file as "
                                           "UTF-8"),
    (b"train:\n  rank: 8\n  rank: 4\n", "line 3, column 3: duplicate key 'rank'"),
])
def test_a_config_file_is_read_as_the_workflow_reads_it_naming_file_line_and_fix(tmp_path, content, said):
    (tmp_path / "layer.yaml").write_bytes(content)
    found = command_line.problems(["--configfile=layer.yaml"], cwd=tmp_path)
    assert len(found) == 1 and found[0].startswith("--configfile layer.yaml: ") and said in found[0], found
    (tmp_path / "fine.yaml").write_text("train: {rank: 8}\n")
    assert command_line.problems(["--configfile=fine.yaml"], cwd=tmp_path) == []
