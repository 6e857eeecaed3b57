"""The project's own lm-eval tasks (``task_files/``) and where lm-eval finds them.

Two tasks built from the study's data, nothing downloaded (``anchormask lm-eval-tasks`` rebuilds
their JSONL from data/; task_files/README.md says how):

* ``anchormask_cloze`` (multiple choice, log-likelihood): a statement of one of the study's
  corpora with one content word blanked, and four words to fill it: the right one and three
  others of the same corpus.
* ``anchormask_locus`` (generate_until): a held-out query of the main query set; the target is its
  gold locus statement; scored by exact match and ``gold_overlap`` (``anchormask.measurement.metric``: the
  share of the answer's word tokens that are words of the gold statement).

The YAMLs name their data relative to their own folder. lm-eval reads ``data_files`` relative to
the working directory, so ``include_dir()`` gives a copy of task_files/ with those paths made
absolute: the tasks resolve wherever the repository is and whatever directory lm-eval runs in.
"""

from __future__ import annotations

import atexit
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from anchormask import data, fileio, study

TASK_DIR = Path(__file__).resolve().parent / "task_files"
TASKS = ("anchormask_cloze", "anchormask_locus")
_DATA_LINE = re.compile(r"^(\s+\w+:\s*)(\S+\.jsonl)\s*$", re.M)
# Words too common to test anything when blanked.
STOPWORDS = frozenset("""about above after again against along among around because before being below
between during every first their there these those through under until where which while within would
could should other another other which whose whom into onto upon""".split())


def task_folder(task: str) -> Path | None:
    """The folder of one of the project's tasks, None for any other task name."""
    return TASK_DIR / task if task in TASKS else None


def task_files(task: str) -> list[str]:
    """The files a local task is made of (its YAML, data, helpers); [] for a task lm-eval brings."""
    folder = task_folder(task)
    return sorted(str(p) for p in folder.iterdir() if p.suffix in (".yaml", ".jsonl", ".py")) if folder else []


def include_dir(extra: str | None = None) -> Path:
    """A temporary copy of task_files/ with each YAML's data files as absolute paths (removed at exit);
    ``extra`` (a user's own --include_path) is linked inside it, so lm-eval finds both."""
    out = Path(tempfile.mkdtemp(prefix="anchormask-tasks-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    for task in TASKS:
        source = TASK_DIR / task
        for path in source.iterdir():
            if path.suffix in (".yaml", ".py"):
                text = path.read_text(encoding="utf-8")
                if path.suffix == ".yaml":
                    text = _DATA_LINE.sub(lambda m: m.group(1) + str(source / m.group(2)), text)
                (out / task).mkdir(exist_ok=True)
                (out / task / path.name).write_text(text, encoding="utf-8")
    if extra:
        (out / "include_path").symlink_to(Path(extra).resolve(), target_is_directory=True)
    return out


def task_manager(extra: str | None = None):
    """lm-eval's TaskManager with the project's tasks (and ``extra``) beside lm-eval's own."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(include_dir(extra)))


def unknown_tasks(names: list[str], extra: str | None = None) -> list[str]:
    """Each name neither the project's nor one lm-eval registers (a path to a task YAML is lm-eval's to
    read), with the nearest registered names. lm-eval's index (some 15,000 tasks, ~20 s) is built only
    when a name is not the project's."""
    import difflib

    others = [n for n in names if n not in TASKS and "/" not in n and not n.endswith(".yaml")]
    if not others:
        return []
    known = set(task_manager(extra).all_tasks)
    problems = []
    for name in (n for n in others if n not in known):
        close = difflib.get_close_matches(name, sorted(known), n=3)
        problems.append(f"{name!r} is not a task lm-eval knows" +
                        (f" (did you mean {', '.join(map(repr, close))}?)" if close else "") +
                        f"; the project's own: {', '.join(TASKS)}")
    return problems


def _candidates(text: str) -> list[str]:
    """Words of a statement that a cloze may blank: lowercase letters only, five or more, not a stopword."""
    return [w for w in re.findall(r"\b[a-z]{5,}\b", text) if w not in STOPWORDS]


def cloze_items(domain: str, corpus: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """One item per statement with a candidate word: the blanked sentence, four choices, the right one's index."""
    pool = sorted({w for s in corpus for w in _candidates(s["text"])})
    items = []
    for statement in corpus:
        words = _candidates(statement["text"])
        if not words:
            continue
        rng = random.Random(f"{seed}:{statement['id']}")
        answer = rng.choice(words)
        others = rng.sample([w for w in pool if w not in set(re.findall(r"[a-z]+", statement["text"]))], 3)
        choices = sorted([answer, *others], key=lambda w: rng.random())
        sentence = re.sub(rf"\b{answer}\b", "____", statement["text"], count=1)
        items.append({"id": statement["id"], "domain": domain, "sentence": sentence, "choices": choices,
                      "label": choices.index(answer)})
    return items


def locus_items(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every held-out query of the main query set with its gold statement."""
    items = []
    for domain in cfg["data"]["held_out"]:
        gold = {s["id"]: s["text"] for s in data.load_corpus(data.corpus_path(cfg, domain))}
        for query in data.load_queries(data.queries_path(cfg, domain)):
            items.append({"id": query["id"], "domain": domain, "query": query["query"],
                          "gold": gold[query["gold_id"]]})
    return items


def build(cfg: dict[str, Any], out: Path = TASK_DIR, seed: int = 0) -> dict[str, int]:
    """Write both tasks' JSONL from the config's corpora and queries; the number of items of each."""
    cloze = [item for domain in study.domains(cfg)
             for item in cloze_items(domain, data.load_corpus(data.corpus_path(cfg, domain)), seed)]
    locus = locus_items(cfg)
    fileio.write_jsonl(out / "anchormask_cloze" / "cloze.jsonl", cloze)
    fileio.write_jsonl(out / "anchormask_locus" / "locus.jsonl", locus)
    return {"anchormask_cloze": len(cloze), "anchormask_locus": len(locus)}
