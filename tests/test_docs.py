"""The documentation's references hold: what cites docs/protocol.md names one of its sections."""

import re

import pytest

from helpers import REPO

pytestmark = pytest.mark.unit

CITATION = re.compile(r'docs/protocol\.md`?,\s+"([^"]+)"')
CITING = ("README.md", "bench", "config", "src", "tests", "workflow")


def protocol_headings() -> set[str]:
    lines = (REPO / "docs" / "protocol.md").read_text().splitlines()
    return {line.lstrip("#").strip() for line in lines if line.startswith("## ") or line.startswith("### ")}


def citing_files():
    for name in CITING:
        path = REPO / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in {".py", ".md", ".yaml", ".smk", ".rst"} and "__pycache__" not in file.parts:
                yield file


def test_every_protocol_citation_names_a_section():
    headings = protocol_headings()
    assert {"Data", "Generation", "Metric", "Statistics", "Mechanism probes"} <= headings
    cited, wrong = 0, []
    for file in citing_files():
        text = file.read_text(errors="replace")
        for section in CITATION.findall(text):
            cited += 1
            if section not in headings:
                wrong.append(f"{file.relative_to(REPO)}: {section!r}")
    assert cited >= 5 and wrong == []


def test_no_reference_to_a_protocol_outside_the_repository():
    this = (REPO / "tests" / "test_docs.py").resolve()
    stale = [str(f.relative_to(REPO)) for f in citing_files() if f.resolve() != this
             and re.search(r"PROTOCOL\b", f.read_text(errors="replace"))]
    assert stale == []
