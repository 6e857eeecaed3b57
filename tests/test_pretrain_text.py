"""The pretraining text: parsing of the two Debian sources, the leak rule, the validation split."""

import gzip
import json

import pytest

from anchormask.embedded_base import pretrain_text as pt

pytestmark = pytest.mark.unit

GCIDE_SAMPLE = '''
00-database-short
   The Collaborative International Dictionary of English v.0.48

Abdomen \\Ab*do"men\\, n. [L. abdomen (a word of uncertain
   etymol.): cf. F. abdomen.]
   1. (Anat.) The belly, or that part of the body between the
      thorax and the pelvis.
      [1913 Webster]

   2. (Zool.) The posterior section of the body, behind the
      thorax, in insects. --Bacon.
      [1913 Webster]

            A general breach or dichotomy with their church.
                                                  --Sir T. Browne.
      [1913 Webster]

   Syn: Belly; paunch; stomach.
      [1913 Webster]

Dichroic \\Di*chro"ic\\, a. [See {Dichroism}.]
   Having the property of dichroism; as, a dichroic crystal.
   [1913 Webster]

This line is front matter, not an entry of the dictionary.
   So is this indented line that follows it, whatever it says.
'''

WORDNET_SAMPLE = (
    "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"
    "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived to exist; "
    "\"the entity was seen\"\n"
)


@pytest.fixture
def sources(tmp_path):
    gcide = tmp_path / "gcide.dict.dz"
    with gzip.open(gcide, "wt", encoding="utf-8") as fh:
        fh.write(GCIDE_SAMPLE)
    wordnet = tmp_path / "wordnet"
    wordnet.mkdir()
    for name in pt.WORDNET_FILES:
        (wordnet / name).write_text(WORDNET_SAMPLE if name == "data.noun" else "", encoding="latin-1")
    return {"wordnet": str(wordnet), "gcide": str(gcide)}


def test_gcide_gives_one_clean_sense_per_line(sources):
    assert pt.gcide_lines(sources["gcide"]) == [
        "abdomen: The belly, or that part of the body between the thorax and the pelvis.",
        "abdomen: The posterior section of the body, behind the thorax, in insects.",
        "dichroic: Having the property of dichroism; as, a dichroic crystal.",
    ]


def test_wordnet_gives_glosses_and_examples_without_the_licence(sources):
    assert pt.wordnet_lines(sources["wordnet"]) == ["entity: that which is perceived to exist.",
                                                    "the entity was seen"]


def test_a_missing_source_names_the_package_to_install(tmp_path):
    with pytest.raises(pt.fileio.InputError, match="apt-get install dict-gcide"):
        pt.gcide_lines(tmp_path / "nowhere.dict.dz")


def test_leak_filter_finds_a_study_text_however_it_is_cased_or_punctuated():
    leak = pt.LeakFilter(["Pulsars are rapidly spinning neutron stars.", "Short text"])
    assert leak.leaks("quoted: PULSARS are rapidly-spinning neutron stars, they say")
    assert leak.leaks("a short text here")
    assert not leak.leaks("pulsars are rapidly spinning")       # a part of a statement is no leak
    assert not leak.leaks("a shorter text")                     # words, not characters


def test_validation_split_is_seeded_order_free_and_about_one_percent():
    lines = [f"line number {i}" for i in range(20000)]
    held = {line for line in lines if pt.is_validation(line, 0, 10)}
    assert 150 < len(held) < 250
    assert held == {line for line in reversed(lines) if pt.is_validation(line, 0, 10)}
    assert held != {line for line in lines if pt.is_validation(line, 1, 10)}


def test_build_text_drops_leaks_and_holds_out_validation_lines(sources, tmp_path):
    study = tmp_path / "corpus.jsonl"
    study.write_text(json.dumps({"id": "x-1", "text": "The entity was seen."}) + "\n")
    text = pt.build_text(sources=sources, study_files=[study], seed=0, validation_per_mille=500)
    everything = text["train"] + text["validation"]
    assert "the entity was seen" not in everything and len(everything) == 4
    assert not set(text["train"]) & set(text["validation"])
    assert text["counts"]["wordnet"]["dropped_as_leaks"] == 1
    assert text["counts"]["gcide"]["train_lines"] + text["counts"]["gcide"]["validation_lines"] == 3
