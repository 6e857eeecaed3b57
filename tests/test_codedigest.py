"""Code digests from a script's import closure (anchormask.repro.codedigest): what runs, not the bytes."""


import json
import re

import pytest

from anchormask.fileio import InputError, canonical_json
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


def test_the_digest_is_canonical_json_of_one_short_digest_per_module_and_stable(package):
    pkg, script = package
    first = digest(script, pkg)
    labels = json.loads(first)
    assert list(labels) == ["__init__", "deep", "direct", "helper", "lazy", "leaf", "script:script.py"]
    assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d in labels.values())
    assert digest(script, pkg) == first and first == canonical_json(labels)


MODULE = '''"""A module."""

import os
import json

LIMIT = 3  # the most


def f(x, scale=2):
    """Scale x."""
    return x * scale + LIMIT


class C:
    """A class."""

    name = "c"
'''


@pytest.mark.parametrize("edit", [
    lambda t: t + "# a comment at the end\n",
    lambda t: t.replace("# the most", "# at most this many"),
    lambda t: t.replace('"""A module."""', '"""A module, described at length.\n\nAnother paragraph."""'),
    lambda t: t.replace('"""Scale x."""', '"""Scale x by ``scale``."""'),
    lambda t: t.replace('    """A class."""\n\n', ""),
    lambda t: t.replace("import os\nimport json", "import json\nimport os"),
    lambda t: t.replace("def f(x, scale=2):", "def f(x,\n      scale=2):"),
    lambda t: t.replace("\n\n\nclass C", "\n\nclass C"),
], ids=["comment", "comment-text", "module-docstring", "function-docstring", "class-docstring-removed",
        "import-order", "reflow", "blank-lines"])
def test_what_does_not_run_does_not_change_the_digest(tmp_path, edit):
    pkg, script = write_package(tmp_path, {"__init__.py": "", "mod.py": MODULE}, "from anchormask import mod\n")
    before = json.loads(digest(script, pkg))
    (pkg / "mod.py").write_text(edit(MODULE))
    assert json.loads(digest(script, pkg)) == before


@pytest.mark.parametrize("edit", [
    lambda t: t.replace("LIMIT = 3", "LIMIT = 4"),
    lambda t: t.replace("scale=2", "scale=3"),
    lambda t: t.replace('name = "c"', 'name = "d"'),
    lambda t: t.replace("x * scale", "scale * x"),
    lambda t: t.replace("import json\n", "import json\nimport sys\n"),
    lambda t: t + "\n\ndef unused():\n    return 1\n",
    lambda t: t.replace('    name = "c"', '    name: str = "c"'),
    lambda t: t.replace("import os\n", "import os\n\nWIDTH: int = 3\n"),
], ids=["constant", "default", "string", "expression", "new-import", "new-function", "class-field-annotation",
        "module-annotation"])
def test_every_change_to_what_runs_changes_the_digest_of_that_module_only(tmp_path, edit):
    pkg, script = write_package(tmp_path, {"__init__.py": "", "mod.py": MODULE, "other.py": "Y = 1\n"},
                                "from anchormask import mod, other\n")
    before = json.loads(digest(script, pkg))
    (pkg / "mod.py").write_text(edit(MODULE))
    after = json.loads(digest(script, pkg))
    assert [label for label in before if before[label] != after[label]] == ["mod"]


TYPED = "from __future__ import annotations\n\n\ndef f(x, scale=2):\n    y = x * scale\n    return y\n"
EVALUATED = TYPED.replace("from __future__ import annotations\n", "")


@pytest.mark.parametrize("before, after, counts", [
    (TYPED, TYPED.replace("def f(x, scale=2):", "def f(x: float, scale: int = 2) -> float:"), False),
    (TYPED, TYPED.replace("    y = x", "    y: float = x"), False),
    (EVALUATED, EVALUATED.replace("    y = x", "    y: float = x"), False),
    # evaluated when the function is defined (a name it uses must exist): code
    (EVALUATED, EVALUATED.replace("def f(x,", "def f(x: float,"), True),
], ids=["signature-postponed", "local-variable", "local-variable-evaluated-module", "signature-evaluated"])
def test_type_annotations_count_only_where_python_evaluates_them(before, after, counts):
    assert before != after
    assert (codedigest.code_of(after) != codedigest.code_of(before)) == counts


def test_a_module_that_reads_its_docstring_counts_it_as_code(tmp_path):
    text = '"""Usage: run it."""\n\nUSAGE = __doc__\n'
    pkg, script = write_package(tmp_path, {"__init__.py": "", "cli.py": text}, "from anchormask import cli\n")
    before = digest(script, pkg)
    (pkg / "cli.py").write_text(text.replace("run it", "run it twice"))
    assert digest(script, pkg) != before


def test_the_scripts_own_code_counts_as_its_module_does(tmp_path):
    pkg, script = write_package(tmp_path, {"__init__.py": ""}, '"""Job."""\nimport anchormask\n\nN = 1\n')
    before = digest(script, pkg)
    script.write_text('"""The job, explained."""\nimport anchormask  # the package\n\nN = 1\n')
    assert digest(script, pkg) == before
    script.write_text('"""Job."""\nimport anchormask\n\nN = 2\n')
    assert digest(script, pkg) != before


def test_closures_of_the_real_scripts_hold_the_modules_the_old_lists_missed():
    verify = codedigest.import_closure((SCRIPTS / "verify_base.py").resolve(), PACKAGE.resolve())
    figure = codedigest.import_closure((SCRIPTS / "figure.py").resolve(), PACKAGE.resolve())
    assert "model.verify" in verify and "repro.runlog" in verify
    assert {"measurement.tables", "reporting", "reporting.figures", "reporting.arms"} <= set(figure)
    assert not {"embedded_base.pretrain", "generation.sampler", "generation.arm_answers", "probes"} & set(figure)
    train = codedigest.import_closure((SCRIPTS / "train_adapter.py").resolve(), PACKAGE.resolve())
    assert {"training.train", "model.backbone", "model.families", "training.masking", "model.layout", "data",
            "study", "fileio"} <= set(train)
    assert not {"measurement.tables", "reporting", "reporting.figures", "stats.bootstrap", "probes",
                "generation.sampler"} & set(train)
    summary = codedigest.import_closure((SCRIPTS / "probe_summary.py").resolve(), PACKAGE.resolve())
    assert {"reporting.probe_markdown", "reporting.markdown", "model.families"} <= set(summary)  # families: KINDS
    # tables, not probe code
    assert not {"probes", "probes.attention", "reporting.figures", "model.backbone"} & set(summary)


def test_every_rule_carries_its_own_scripts_digest(tmp_path):
    """A rule names its script once (`script:`); add_code_params, run when the DAG is built, gives it
    that script's digest as params.code and refuses a code param that is anything else."""
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


def test_only_the_data_files_a_package_declares_count_and_yaml_by_its_content(tmp_path):
    """Schemas are package data (anchormask/schemas/*.yaml, listed in its DATA_FILES): editing one reruns the
    jobs that load them; a file nobody declares (an editor's swap file, .DS_Store, a .orig) counts for nothing."""
    pkg, reader = write_package(tmp_path, {
        "__init__.py": "", "data/__init__.py": 'DATA_FILES = ("table.schema.yaml",)\n',
        "data/table.schema.yaml": "type: object  # a record\n", "other.py": "",
    }, "from anchormask import data\n")
    other = tmp_path / "other.py"
    other.write_text("from anchormask import other\n")
    before, before_other = digest(reader, pkg), digest(other, pkg)
    for stray in (".DS_Store", ".table.schema.yaml.swp", "table.schema.yaml.orig", "notes.txt"):
        (pkg / "data" / stray).write_text("anything\n")
    (pkg / "data" / "table.schema.yaml").write_text("# the table\ntype:   object\n")  # same content
    assert digest(reader, pkg) == before
    (pkg / "data" / "table.schema.yaml").write_text("type: object\ndescription: A record, reworded.\n")
    assert digest(reader, pkg) == before  # a schema's description is for people: no code runs it
    (pkg / "data" / "table.schema.yaml").write_text("type: object\nproperties: {description: {type: string}}\n")
    assert digest(reader, pkg) != before  # a property named description is part of the schema
    (pkg / "data" / "table.schema.yaml").write_text("type: array\n")
    assert digest(reader, pkg) != before
    assert digest(other, pkg) == before_other


def test_a_declared_data_file_that_is_missing_is_an_error_naming_the_module_and_file(tmp_path):
    pkg, reader = write_package(tmp_path, {"__init__.py": "", "data/__init__.py": 'DATA_FILES = ("gone.yaml",)\n'},
                                "from anchormask import data\n")
    with pytest.raises(InputError, match=r"data/__init__.py: DATA_FILES names .*gone.yaml, which does not exist"):
        digest(reader, pkg)


def test_the_real_schemas_package_declares_every_schema_it_holds():
    from anchormask import schemas

    assert sorted(schemas.DATA_FILES) == sorted(p.name for p in (PACKAGE / "schemas").glob("*.schema.yaml"))


def test_changed_modules_names_what_changed_since_a_recorded_digest(package, tmp_path):
    pkg, script = package
    recorded = digest(script, pkg)
    (pkg / "leaf.py").write_text("VALUE = 3\n")
    (pkg / "lazy.py").write_text("X = 2  # a comment only\n")
    (pkg / "deep.py").unlink()
    script.write_text(script.read_text() + "N = 1\n")
    assert codedigest.changed_modules(recorded, tmp_path, pkg) == ["deep", "leaf", "script:script.py"]
    assert codedigest.changed_modules("0" * 64, tmp_path, pkg) == []  # a digest of the old form: no detail
