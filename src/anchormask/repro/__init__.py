"""Reproducibility records: what made each output (the audit of a results tree is ``settings.audit``).

* ``codedigest``: the digest of the library code a workflow script runs (rules' code trigger).
* ``provenance``: the software and machine every output records.
* ``runlog``: job logging to the rule's log file and stderr.
"""
