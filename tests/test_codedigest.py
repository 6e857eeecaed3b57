"""Code digests from a script's import closure (anchormask.repro.codedigest), not from hand-written lists."""


import pytest

from anchormask.fileio import InputError
from anchormask.repro import codedigest
from helpers import REPO

pytestmark = pytest.mark.unit

SCRIPTS = REPO / "workflow" / "scripts"
PACKAGE = REPO / "src" / "anchormask"


def write_package(tmp_path, files: dict[str, str], script: str):
    """A package named anchormask under tmp_path (relative file name -> text) and a script beside it."""
    pkg = tmp_path / "anchormask"
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    (tmp_path / "script.py").write_text(script)
    return pkg, tmp_path / "script.py"


@pytest.fixture
def package(tmp_path):
    """A package named anchormask with every import form, and a module nobody imports."""
    return write_package(tmp_path, {
        "__init__.py": '"""pkg"""\n',
        "direct.py": "from anchormask.helper import something\n\ndef f():\n    from . import lazy\n",
        "helper.py": "import json\nimport anchormask.deep\n\ndef something():\n    pass\n",
        "deep.py": "from .leaf import VALUE\n",
        "leaf.py": "VALUE = 1\n",
        "lazy.py": "X = 2\n",
        "unused.py": "from anchormask import leaf\n",
    }, "import os\nfrom anchormask import direct, runlog_missing\n")


def digest(script, pkg):
    codedigest.import_closure.cache_clear()
    return codedigest.script_code_digest(script, pkg)


def test_closure_follows_every_import_form_transitively(package):
    pkg, script = package
    closure = codedigest.import_closure(script.resolve(), pkg.resolve())
    assert closure == ("", "deep", "direct", "helper", "lazy", "leaf")


def test_editing_an_imported_module_changes_the_digest_and_an_unimported_one_does_not(package):
    pkg, script = package
    before = digest(script, pkg)
    (pkg / "unused.py").write_text("CHANGED = True\n")
    assert digest(script, pkg) == before
    (pkg / "leaf.py").write_text("VALUE = 3\n")  # three imports away, through a relative import
    changed = digest(script, pkg)
    assert changed != before
    (pkg / "lazy.py").write_text("X = 4\n")  # imported inside a function only
    assert digest(script, pkg) != changed


def test_digest_is_plain_text_and_stable(package):
    pkg, script = package
    first = digest(script, pkg)
    assert isinstance(first, str) and len(first) == 64 and digest(script, pkg) == first


def test_closures_of_the_real_scripts_hold_the_modules_the_old_lists_missed():
    verify = codedigest.import_closure((SCRIPTS / "verify_base.py").resolve(), PACKAGE.resolve())
    figure = codedigest.import_closure((SCRIPTS / "figure.py").resolve(), PACKAGE.resolve())
    assert "model.verify" in verify and "repro.runlog" in verify
    assert {"measurement.tables", "reporting", "reporting.figures", "reporting.arms"} <= set(figure)
    assert not {"embedded_base.pretrain", "generation.sampler", "generation.arm_answers", "probes"} & set(figure)
    train = codedigest.import_closure((SCRIPTS / "train_adapter.py").resolve(), PACKAGE.resolve())
    assert {"training.train", "model.backbone", "model.families", "training.masking", "model.layout", "data",
            "settings.study", "fileio"} <= set(train)
    assert not {"measurement.tables", "reporting", "reporting.figures", "stats.bootstrap", "probes",
                "generation.sampler"} & set(train)
    summary = codedigest.import_closure((SCRIPTS / "probe_summary.py").resolve(), PACKAGE.resolve())
    assert {"reporting.probe_markdown", "reporting.markdown", "model.families"} <= set(summary)  # families: KINDS
    # tables, not probe code
    assert not {"probes", "probes.attention", "reporting.figures", "model.backbone"} & set(summary)


def test_every_rule_carries_its_own_scripts_digest(tmp_path):
    """A rule names its script once (`script:`); add_code_params, run when the DAG is built, gives it
    that script's digest as params.code and refuses a code param that is anything else."""
    import re

    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for block in re.split(r"(?m)^(?=\s*rule \w+:)", smk.read_text())[1:]:
            script = re.search(r'script:\n\s+"\.\./scripts/(\w+\.py)"', block)
            if script:
                assert "code=" not in block, (smk.name, block.splitlines()[0])
                assert (SCRIPTS / script.group(1)).is_file()

    class Rule:
        def __init__(self, name, script, params):
            self.name, self.script, self.params = name, script, params

        def set_params(self, **params):
            self.params.update(params)

    pkg, script = write_package(tmp_path, {"__init__.py": "", "a.py": "X = 1\n"}, "from anchormask import a\n")
    rules = [Rule("runs", "../scripts/script.py", {"other": "1"}), Rule("shell", None, {}),
             Rule("again", "../scripts/script.py", {"code": digest(script, pkg)})]
    codedigest.add_code_params(rules, tmp_path, pkg)
    assert [r.params for r in rules] == [{"other": "1", "code": digest(script, pkg)}, {}, {"code": digest(script, pkg)}]
    with pytest.raises(InputError, match="rule wrong: params.code is not the digest of script.py"):
        codedigest.add_code_params([Rule("wrong", "../scripts/script.py", {"code": "by hand"})], tmp_path, pkg)


def test_closure_follows_subpackages_their_init_and_relative_imports(tmp_path):
    pkg, script = write_package(tmp_path, {
        "__init__.py": "",
        "top.py": "X = 1\n",
        "other.py": "Y = 1\n",
        "sub/__init__.py": "from . import shared\n",
        "sub/shared.py": "from ..top import X\n",
        "sub/leaf.py": "from .shared import X\nfrom anchormask import other\n",
        "sub/unused.py": "",
    }, "from anchormask.sub import leaf\n")
    closure = codedigest.import_closure(script.resolve(), pkg.resolve())
    assert closure == ("", "other", "sub", "sub.leaf", "sub.shared", "top")
    before = digest(script, pkg)
    (pkg / "sub" / "unused.py").write_text("Z = 1\n")
    assert digest(script, pkg) == before
    (pkg / "top.py").write_text("X = 2\n")  # reached through the subpackage's relative imports
    assert digest(script, pkg) != before


def test_a_subpackages_data_file_counts_like_its_code(tmp_path):
    """Schemas are package data (anchormask/schemas/*.yaml): editing one reruns the jobs that load them."""
    pkg = tmp_path / "anchormask"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "__init__.py").write_text("")
    (pkg / "data" / "table.schema.yaml").write_text("type: object\n")
    (pkg / "notes.txt").write_text("the package root's own files are not data of a subpackage\n")
    reader, other = tmp_path / "reader.py", tmp_path / "other.py"
    reader.write_text("from anchormask import data\n")
    other.write_text("import anchormask\n")
    before, before_other = digest(reader, pkg), digest(other, pkg)
    (pkg / "data" / "table.schema.yaml").write_text("type: array\n")
    assert digest(reader, pkg) != before
    assert digest(other, pkg) == before_other
    (pkg / "notes.txt").write_text("edited\n")
    assert digest(other, pkg) == before_other
