import json
import logging
import runpy
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from anchormask import data
from anchormask.checksum import file_sha256
from anchormask.fileio import InputError, canonical_json, write_jsonl
from anchormask.measurement import tables
from anchormask.reporting import markdown
from anchormask.stats import pairwise
from helpers import REPO

pytestmark = pytest.mark.unit

SCRIPTS = REPO / "workflow" / "scripts"

GEO = ["The Nile flows north into the Mediterranean Sea.", "Lake Baikal is the deepest lake."]
ASTRO = ["Mars appears reddish because of iron oxide dust.", "Jupiter is the largest planet."]


def corpora(tmp_path):
    paths = {}
    for domain, texts in (("geo", GEO), ("astro", ASTRO)):
        paths[domain] = tmp_path / f"{domain}.jsonl"
        write_jsonl(paths[domain], [{"id": f"{domain}-{i:03d}", "text": t} for i, t in enumerate(texts)])
    return paths


def record(query_id, domain, arm, text, *, seed=42, strategy="anchor", targets="full", size=144, steps=300,
           query_set="main"):
    adapter = None if arm == "base" else f"{strategy}_{targets}_n{size}_s{steps}_seed{seed}"
    return {
        "query_id": query_id, "domain": domain, "split": "in_domain" if domain == "geo" else "held_out",
        "query_set": query_set, "arm": arm, "strategy": None if arm == "base" else strategy,
        "targets": None if arm == "base" else targets,
        "train_size": None if arm == "base" else size, "train_steps": None if arm == "base" else steps,
        "train_seed": None if arm == "base" else seed, "adapter_id": adapter,
        "adapter_sha256": None if arm == "base" else "ab" * 32, "query": f"question {query_id}?",
        "statement_id": f"{domain}-000", "statement": "an anchor", "locked_tokens": 3, "anchor_truncated": False,
        "generated_text": "an anchor " + text, "post_anchor_text": text, "post_anchor_tokens": len(text.split()),
        "ended": bool(text), "continues_anchor_word": False, "forward_passes": 16,
        "sampler": {"answer_len": 48, "steps": 16}, "seed": 1234,
        "base_sha256": "cd" * 32, "versions": {"python": "3.12"},
    }


def records():
    return [
        record("geo-q1", "geo", "anchor", "the nile is the lake"),        # 5/5 in geo vocab
        record("geo-q1", "geo", "random", "mars is the largest planet"),  # is, the: 2/5 in geo
        record("geo-q1", "geo", "base", ""),                              # empty
        record("astro-q1", "astro", "anchor", "Mars, the red planet!", strategy="anchor"),  # mars the planet: 3/4
        record("astro-q1", "astro", "random", "the nile flows north", strategy="random"),   # the: 1/4
        record("astro-q1", "astro", "base", "jupiter jupiter", strategy="anchor"),          # 2/2
    ]


def write_records(path, recs):
    path.write_text("".join(canonical_json(r) + "\n" for r in recs))
    return path


@pytest.fixture
def gen_file(tmp_path):
    return write_records(tmp_path / "all.jsonl", records())


def test_scores_each_record_against_its_own_domain(tmp_path, gen_file):
    df = tables.generations_table([gen_file], corpora(tmp_path))
    got = {(r.query_id, r.arm): (r.overlap, r.word_tokens, r.empty) for r in df.itertuples()}
    assert got[("geo-q1", "anchor")] == (1.0, 5, False)
    assert got[("geo-q1", "random")] == (0.4, 5, False)
    assert got[("geo-q1", "base")] == (0.0, 0, True)
    assert got[("astro-q1", "anchor")] == (0.75, 4, False)
    assert got[("astro-q1", "random")] == (0.25, 4, False)
    assert got[("astro-q1", "base")] == (1.0, 2, False)
    assert list(df.columns) == tables.GENERATIONS_SCHEMA.names
    rows = df.set_index(["query_id", "arm"])
    repeated = rows.loc[("astro-q1", "base")]   # "jupiter jupiter"
    assert (repeated["distinct_1"], repeated["distinct_2"], repeated["adjacent_repeats"]) == (0.5, 1.0, 1.0)
    assert repeated["content_words"] == 2 and repeated["content_overlap"] == 1.0 and repeated["ended"]
    random = rows.loc[("geo-q1", "random")]     # "mars is the largest planet": content mars, largest, planet
    assert random["content_words"] == 3 and random["content_overlap"] == 0.0 and random["overlap"] == 0.4
    empty = rows.loc[("geo-q1", "base")]
    assert not empty["ended"] and empty["content_overlap"] == 0.0 and np.isnan(empty["distinct_1"])


def test_rows_sorted_whatever_the_input_order(tmp_path):
    recs = records()
    a = tables.generations_table([write_records(tmp_path / "a.jsonl", recs)], corpora(tmp_path))
    b = tables.generations_table([write_records(tmp_path / "b.jsonl", recs[::-1])], corpora(tmp_path))
    pd.testing.assert_frame_equal(a, b)
    assert list(zip(a["arm"], a["split"])) == sorted(zip(a["arm"], a["split"]))


def test_parquet_is_byte_identical_and_round_trips(tmp_path, gen_file):
    paths = corpora(tmp_path)
    out1, out2 = tmp_path / "one.parquet", tmp_path / "sub" / "two.parquet"
    tables.write_parquet(tables.generations_table([gen_file], paths), out1, tables.GENERATIONS_SCHEMA)
    tables.write_parquet(tables.generations_table([gen_file], paths), out2, tables.GENERATIONS_SCHEMA)
    assert out1.read_bytes() == out2.read_bytes()
    assert pq.read_schema(out1).remove_metadata().equals(tables.GENERATIONS_SCHEMA)
    assert not [p for p in tmp_path.rglob(".tmp-*")]

    back = tables.read_parquet(out1)
    assert len(back) == 6 and back["train_seed"].isna().sum() == 2
    assert str(back["train_seed"].dtype) == "Int64"
    meta = back.attrs["anchormask"]
    assert meta["inputs"] == [{"path": str(gen_file), "sha256": file_sha256(gen_file)}]
    assert meta["corpora"]["astro"]["sha256"] == file_sha256(paths["astro"])
    assert meta["metric"]["word_pattern"] == r"[^\W_]+"
    assert "pandas" not in {k.decode() for k in pq.read_schema(out1).metadata}

    # a changed input changes the provenance, hence the bytes
    write_records(gen_file, records()[:-1])
    tables.write_parquet(tables.generations_table([gen_file], paths), out2, tables.GENERATIONS_SCHEMA)
    assert out1.read_bytes() != out2.read_bytes()


def test_schema_violation_names_file_and_line(tmp_path):
    recs = records()
    del recs[2]["post_anchor_text"]
    path = write_records(tmp_path / "bad.jsonl", recs)
    with pytest.raises(InputError, match=r"bad.jsonl: line 3: .*post_anchor_text"):
        tables.generations_table([path], corpora(tmp_path))


def test_tables_check_records_as_data_loading_does(tmp_path):
    """One check per kind of record: the table refuses what data.load_* refuses, with the same message."""
    recs = records()
    recs[1]["locked_tokens"] = "three"
    path = write_records(tmp_path / "bad.jsonl", recs)
    with pytest.raises(InputError) as by_data:
        data.load_generations(path)
    with pytest.raises(InputError) as by_table:
        tables.generations_table([path], corpora(tmp_path))
    assert str(by_table.value) == str(by_data.value) and "line 2: field 'locked_tokens'" in str(by_data.value)
    paths = corpora(tmp_path)
    write_jsonl(paths["geo"], [{"id": "geo-000", "text": GEO[0]}, {"id": "geo-000", "text": GEO[1]}])
    with pytest.raises(InputError, match="geo.jsonl: line 2: field 'id': duplicate id 'geo-000'"):
        tables.generations_table([write_records(tmp_path / "ok.jsonl", records())], paths)


def test_domain_without_corpus_duplicates_and_mixed_bases_are_errors(tmp_path):
    paths = corpora(tmp_path)
    path = write_records(tmp_path / "x.jsonl", records())
    with pytest.raises(InputError, match="domain 'astro' has no corpus"):
        tables.generations_table([path], {"geo": paths["geo"]})
    recs = records()
    dup = write_records(tmp_path / "dup.jsonl", recs + [recs[0]])
    with pytest.raises(InputError, match=r"dup.jsonl: line 7: repeats the generation at .*line 1"):
        tables.generations_table([dup], paths)
    recs[4]["base_sha256"] = "ef" * 32
    with pytest.raises(InputError, match="line 5: base_sha256"):
        tables.generations_table([write_records(tmp_path / "mixed.jsonl", recs)], paths)


def test_several_jsonl_files_and_seeds(tmp_path):
    recs = records()
    extra = [dict(r, train_seed=43, adapter_id=(r["adapter_id"] or "") + "x") for r in recs if r["arm"] != "base"]
    files = [write_records(tmp_path / "s42.jsonl", recs), write_records(tmp_path / "s43.jsonl", extra)]
    df = tables.generations_table(files, corpora(tmp_path))
    assert len(df) == 10
    per_query = pairwise.per_query(df)
    assert per_query.set_index(["arm", "query_id"]).loc[("anchor", "geo-q1"), "runs"] == 2


def test_shipped_corpora_tell_their_domains_apart(tmp_path):
    """The first statement of every shipped corpus, as a generation of every domain: it scores 1.0
    against its own domain's corpus only (each statement has a word the other corpora lack)."""
    files = {path.stem: path for path in sorted((REPO / "data" / "corpora").glob("*.jsonl"))}
    firsts = {d: json.loads(path.read_text().splitlines()[0])["text"] for d, path in files.items()}
    recs = [record(f"{source}-as-{domain}", domain, "anchor", text)
            for source, text in firsts.items() for domain in files]
    df = tables.generations_table([write_records(tmp_path / "g.jsonl", recs)], files)
    full = sorted(df.loc[df["overlap"] == 1.0, "query_id"])
    assert len(df) == len(files) ** 2 and full == sorted(f"{d}-as-{d}" for d in files)


# --------------------------------------------------------------------------- stats tables and headline

def stats_frames():
    gen = np.random.default_rng(0)
    rows = []
    for q in range(10):
        v = gen.uniform(0.1, 0.4)
        for arm, strategy, value in (("anchor", "anchor", 1.5 * v), ("random", "random", v), ("base", None, 0.0)):
            rows.append(dict(query_id=f"q{q}", domain="astro", split="held_out", arm=arm, strategy=strategy,
                             train_seed=42, overlap=value))
    df = pd.DataFrame(rows)
    comps = pairwise.run_comparisons(df, [
        {"name": "heldout_anchor_vs_random", "a": "anchor", "b": "random", "split": "held_out",
         "report": "1.67x [1.51, 1.85], P(a>b) = 1.000, N = 48"},
        {"name": "heldout_anchor_vs_base", "a": "anchor", "b": "base", "split": "held_out"}], 500, 0.95, 3)
    sweep_rows = [dict(r, arm=f"sweep:{r['strategy']}_n72_s{k}", train_size=72, train_steps=k)
                  for k in (100, 1000) for r in rows if r["strategy"]]
    sweep = pairwise.run_sweep(pd.DataFrame(sweep_rows), 500, 0.95, 3, report={"72x100": "1.97-2.19x at 100 steps"},
                               strategies=["anchor", "random"])
    return comps, sweep


def test_stats_parquet_byte_stable_with_explicit_schemas(tmp_path):
    comps, sweep = stats_frames()
    for df, schema, name in ((comps, tables.COMPARISONS_SCHEMA, "c"), (sweep, tables.SWEEP_SCHEMA, "s")):
        tables.write_parquet(df, tmp_path / f"{name}1.parquet", schema, metadata={"k": 1})
        tables.write_parquet(df, tmp_path / f"{name}2.parquet", schema, metadata={"k": 1})
        assert (tmp_path / f"{name}1.parquet").read_bytes() == (tmp_path / f"{name}2.parquet").read_bytes()
        back = tables.read_parquet(tmp_path / f"{name}1.parquet")
        assert back.attrs["anchormask"] == {"k": 1}
        assert list(back.columns) == schema.names
    back = tables.read_parquet(tmp_path / "c1.parquet")
    assert back.loc[1, "ratio"] == np.inf and back["report"].isna().tolist() == [False, True]


def test_headline_markdown_lists_ours_beside_the_report():
    comps, sweep = stats_frames()
    content = comps.assign(metric="content_overlap", name=comps["name"] + "_content")
    text = markdown.headline_markdown(comps, sweep, {"path": "data/base", "sha256": "418e" + "0" * 60}, content,
                                      sweep_strategies=["anchor", "random"])
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("| heldout_anchor_vs_random "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    r = comps.iloc[0]
    assert cells[4] == "10"
    assert cells[7] == f"{r['ratio']:.2f}x [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}]"
    assert cells[9] == "1.000"
    assert cells[10] == f"{r['p_perm']:.4f}" and cells[11] == f"{r['p_holm']:.4f}"
    assert cells[12] == "1.67x [1.51, 1.85], P(a>b) = 1.000, N = 48"
    assert "(Holm over m = 2)" in text and "| heldout_anchor_vs_random_content |" in text
    assert text.index("corpus_overlap (Holm") < text.index("content-word overlap (Holm") < text.index("## Sweep")
    assert "Per training seed" not in text  # one seed: nothing to break down
    base_row = next(line for line in lines if line.startswith("| heldout_anchor_vs_base "))
    assert "infx [inf, inf]" in base_row and base_row.rstrip().endswith("| — |")
    sweep_rows = [line for line in lines if line.startswith("| 72 |")]
    assert len(sweep_rows) == 2 and "1.97-2.19x at 100 steps" in sweep_rows[0]
    assert "`data/base`" in text and "418e" + "0" * 60 in text
    assert "resamples 500" in text and "seed 3" in text


def test_headline_shows_each_seed_beside_the_pooled_value():
    df = pd.DataFrame([dict(query_id=f"q{q}", domain="astro", split="held_out", arm=arm, train_seed=seed,
                            overlap=(0.2 + 0.1 * (seed - 42)) * (2 if arm == "anchor" else 1))
                       for q in range(4) for seed in (42, 43) for arm in ("anchor", "random")])
    comps = [{"name": "h", "a": "anchor", "b": "random", "split": "held_out"}]
    stats = pairwise.run_comparisons(df, comps, 200, 0.95, 1)
    _, sweep = stats_frames()
    text = markdown.headline_markdown(stats, sweep, "base", stats, pairwise.per_seed(df, comps),
                                      sweep_strategies=["anchor", "random"])
    assert "| h | 2.00x [2.00, 2.00] | 42: 2.00x, 43: 2.00x | +0.200, +0.300 |" in text
    assert "| h | split=held_out | anchor | random | 4 × 2 seeds |" in text


# --------------------------------------------------------------------------- thin scripts

class Named(list):
    def __init__(self, items=(), **named):
        super().__init__(items)
        self.__dict__.update(named)


def run_script(name, **parts):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        runpy.run_path(str(SCRIPTS / name), init_globals={"snakemake": SimpleNamespace(**parts)}, run_name="__main__")
    finally:
        for h in root.handlers:
            if h not in saved[0]:
                h.close()
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_scripts_aggregate_statistics_headline(tmp_path, gen_file):
    paths = corpora(tmp_path)
    table = tmp_path / "tables" / "generations.parquet"
    # The second query set: held-out only; anchor "jupiter planet" 2/2 in astro, random "the nile" 1/2.
    alt_file = write_records(tmp_path / "alt.jsonl", [
        record("astro-alt-q1", "astro", arm, text, strategy=arm if arm != "base" else "anchor", query_set="alt")
        for arm, text in (("anchor", "jupiter planet"), ("random", "the nile"), ("base", "jupiter"))])
    run_script("aggregate.py", input=Named(generations=[str(gen_file), str(alt_file)],
                                           corpora=[str(paths["geo"]), str(paths["astro"])]),
               output=Named([str(table)]), params=Named(domains=json.dumps(["geo", "astro"])),
               log=Named([str(tmp_path / "agg.log")]))
    df = tables.read_parquet(table)
    assert df.set_index(["query_id", "arm"]).loc[("astro-q1", "anchor"), "overlap"] == 0.75
    assert "9 generations" in (tmp_path / "agg.log").read_text()

    settings = {"resamples": 200, "permutations": 100, "confidence": 0.9, "seed": 1,
                "comparisons": [{"name": "h", "a": "anchor", "b": "random", "split": "held_out", "report": "r"},
                                {"name": "i", "a": "anchor", "b": "random", "split": "in_domain"}]}
    comps = tmp_path / "stats" / "comparisons.parquet"
    content = tmp_path / "stats" / "content_comparisons.parquet"
    alt = tmp_path / "stats" / "comparisons_alt.parquet"
    specs = [{"table": "comparisons", "metric": "overlap", "query_set": "main"},
             {"table": "content_comparisons", "metric": "content_overlap", "query_set": "main"},
             {"table": "comparisons_alt", "metric": "overlap", "query_set": "alt"}]
    run_script("statistics.py", input=Named([str(table)]), output=Named([str(comps), str(content), str(alt)]),
               params=Named(kind="comparisons", settings=canonical_json(settings), tables=canonical_json(specs)),
               log=Named([str(tmp_path / "stats.log")]))
    out = tables.read_parquet(comps)
    assert out.loc[0, "name"] == "h" and out.loc[0, "ratio"] == 3.0 and out.loc[0, "n"] == 1  # main set only
    alt_out = tables.read_parquet(alt)
    assert alt_out["name"].tolist() == ["h"]  # the second set has no in-domain queries
    assert alt_out.loc[0, "ratio"] == 2.0 and alt_out.attrs["anchormask"]["query_set"] == "alt"
    assert out.attrs["anchormask"]["settings"] == settings
    # astro-q1: anchor "mars the planet" -> content mars, red, planet: 2/3; random "nile flows north": 0/3
    content_out = tables.read_parquet(content)
    assert content_out.loc[0, "metric"] == "content_overlap" and content_out.loc[0, "mean_a"] == pytest.approx(2 / 3)
    assert content_out.loc[0, "mean_b"] == 0.0

    sweep_df = df.assign(arm=df["arm"].map(lambda a: f"sweep:{a}_n72_s100"), train_size=72, train_steps=100)
    sweep_df = sweep_df[sweep_df["strategy"].notna() & (sweep_df["query_set"] == "main")]
    sweep_table = tmp_path / "tables" / "sweep.parquet"
    tables.write_parquet(sweep_df, sweep_table, tables.GENERATIONS_SCHEMA)
    sweep_stats = tmp_path / "stats" / "sweep.parquet"
    run_script("statistics.py", input=Named([str(sweep_table)]), output=Named([str(sweep_stats)]),
               params=Named(kind="sweep", strategies=canonical_json(["anchor", "random"]),
                            tables=canonical_json([{"table": "sweep", "metric": "overlap", "query_set": "main"}]),
                            settings=canonical_json({"resamples": 200, "permutations": 100, "confidence": 0.9,
                                                     "seed": 1, "sweep_report": {"72x100": "2x"}})),
               log=Named([str(tmp_path / "sweep.log")]))
    assert tables.read_parquet(sweep_stats).loc[0, "report"] == "2x"

    headline = tmp_path / "tables" / "headline.md"
    run_script("headline.py", input=Named(comparisons=str(comps), sweep=str(sweep_stats), content=str(content),
                                          generations=str(table), alt=[str(alt)]),
               output=Named([str(headline)]), params=Named(base=canonical_json({"path": "data/base", "sha256": "abc"}),
                                                           comparisons=canonical_json(settings["comparisons"]),
                                                           sweep_strategies=canonical_json(["anchor", "random"])),
               log=Named([str(tmp_path / "headline.log")]))
    text = headline.read_text()
    assert "| h | split=held_out | anchor | random | 1 |" in text and "sha256 `abc`" in text
    assert "| h | 1 | 3.00x [3.00, 3.00] | +0.500 |" in text and "| 1 | 2.00x [2.00, 2.00] | +0.500 |" in text


def test_headline_shows_one_sweep_table_per_strategy_the_first_is_compared_with():
    gen = np.random.default_rng(1)
    rows = [dict(query_id=f"q{q}", domain="astro", split="held_out", strategy=strategy, train_seed=42,
                 overlap=gen.uniform(0.1, 0.4), arm=f"sweep:{strategy}_n72_s{k}", train_size=72, train_steps=k)
            for q in range(6) for k in (100, 300) for strategy in ("anchor", "random", "reverse")]
    strategies = ["anchor", "random", "reverse"]
    sweep = pairwise.run_sweep(pd.DataFrame(rows), 200, 0.95, 3, strategies=strategies)
    comps, _ = stats_frames()
    text = markdown.headline_markdown(comps, sweep, "base", comps, sweep_strategies=strategies)
    first, second = text.index("## Sweep: anchor vs random"), text.index("## Sweep: anchor vs reverse")
    assert "| mean anchor | mean reverse | anchor/reverse [CI] |" in text[second:]
    for section, other in ((text[first:second], "random"), (text[second:text.index("## Notes")], "reverse")):
        rows_shown = [line for line in section.splitlines() if line.startswith("| 72 |")]
        expected = sweep[sweep["b"].str.startswith(f"sweep:{other}_")]
        assert len(rows_shown) == len(expected) == 2
        assert [f"{m:.3f}" for m in expected["mean_b"]] == [line.split("|")[5].strip() for line in rows_shown]
