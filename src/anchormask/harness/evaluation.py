"""One evaluation of the DAG's lm-eval stage (workflow/rules/lm_eval.smk): an arm (the base, or the base
with one adapter) on one task, written as JSON.

The JSON keeps what lm-eval reports about the scores (``results``, ``versions``, ``n-shot``,
``higher_is_better``, ``n-samples``) and who was evaluated; lm-eval's timings, dates and environment
dump are left out, so a rerun with the same inputs writes the same bytes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from anchormask import fileio
from anchormask.generation import sampler
from anchormask.harness import model, tasks
from anchormask.model import modeljob

log = logging.getLogger(__name__)
KEPT = ("results", "versions", "n-shot", "higher_is_better", "n-samples")


def evaluate(*, base: modeljob.Base, settings: sampler.SamplerSettings, job: dict[str, Any],
             options: dict[str, Any], threads: int, out: str) -> dict[str, Any]:
    """Run lm-eval's evaluator on one task with the base (and the job's adapter); write the JSON record."""
    from lm_eval import simple_evaluate
    from lm_eval.utils import handle_non_serializable

    setup = model.Setup(base=base, settings=settings, adapter=job["adapter"], mc_num=options["mc_num"],
                        batch_size=options["batch_size"], seed=options["seed"], cfg=settings.cfg_scale,
                        threads=threads)
    found = simple_evaluate(model=model.AnchormaskLM(setup), tasks=[job["task"]], task_manager=tasks.task_manager(),
                            limit=options["limit"], num_fewshot=options["num_fewshot"], random_seed=options["seed"],
                            numpy_random_seed=options["seed"], torch_random_seed=options["seed"],
                            fewshot_random_seed=options["seed"])
    record = {key: found[key] for key in KEPT if key in found}
    record["anchormask"] = {**job, "base_sha256": base.sha256, "options": options, "sampler": settings.record()}
    fileio.write_text(out, json.dumps(record, default=handle_non_serializable, indent=1, sort_keys=True) + "\n")
    log.info("%s: %s", job["task"], record["results"].get(job["task"]))
    return record
