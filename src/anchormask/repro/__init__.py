"""Reproducibility tooling: what made each output, and whether a rerun changed it.

* ``codedigest``: the digest of the library code a workflow script runs (rules' code trigger).
* ``provenance``: the software and machine every output records.
* ``audit``: manifests of a results tree and their comparison across reruns.
* ``runlog``: job logging to the rule's log file and stderr.
"""
