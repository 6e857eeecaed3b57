"""Reading and checking a study: its configuration, the jobs it asks for, several bases, the command line.

* ``config``: YAML reading, layering and validation against ``schemas/`` with readable errors.
* ``layers``: the configuration's sources (config.yaml, --configfile, --config, a base's layer),
  which one set a key, merging one over another, and the types of --config values.
* ``checks``: the checks every study passes when the workflow is read (one sequence for one base and
  for each base of several), and what the main process reports once per run.
* ``anchors``: the statements too long to serve as an anchor, and the anchors generation will cut.
* ``audit``: manifests of a results tree, their comparison across reruns, why a job reruns.
* ``leftovers``: the outputs under results/ that the current configuration does not produce.
* ``bases``: the ``bases:`` mapping, each base's merged and checked configuration.
* ``command_line``: checks of a snakemake command line that Snakemake would answer with a traceback.
"""
