"""One pipeline job, run the way the Snakemake scripts run it (for the memory benchmark's children).

python -m bench.jobs train OUT_DIR [STEPS]
    the default anchor / full training job (train.default size and steps, first seed) -> OUT_DIR
python -m bench.jobs generate ADAPTER_DIR RETRIEVAL_DIR OUT_JSONL
    the anchor arm's generation job with that adapter over RETRIEVAL_DIR/*.jsonl -> OUT_JSONL
python -m bench.jobs imports
    only the imports a job makes (the interpreter + torch + transformers + peft baseline)
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from anchormask.generation import arm_answers, sampler  # noqa: F401  (the baseline's imports)
    from anchormask.training import train

    if argv[0] == "imports":
        return 0
    from anchormask import study
    from bench import common

    cfg = common.load_config()
    base = common.base(cfg)
    if argv[0] == "train":
        size, steps = cfg["train"]["default"]["size"], cfg["train"]["default"]["steps"]
        if len(argv) > 2:
            steps = int(argv[2])
        job = study.AdapterJob("anchor", "full", size, steps, cfg["train"]["seeds"][0])
        train.train(base, str(common.repo_path(cfg["data"]["pairs"])), job, study.run_settings(cfg, "anchor"),
                    argv[1])
        return 0
    if argv[0] == "generate":
        adapter, retrieval_dir, out = argv[1:4]
        files = sorted(str(p) for p in Path(retrieval_dir).glob("*.jsonl"))
        arm_answers.run_arm(arm="anchor", strategy="anchor", targets="full", adapters=[adapter],
                           retrieval_files=files, out=out, base=base,
                           settings=sampler.SamplerSettings.from_config(cfg["generation"]),
                           threads=cfg["generation"]["threads"])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
