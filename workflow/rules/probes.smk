# Mechanism probes: attention mass, LoRA weight allocation, mask-count robustness.


def probe_targets():
    return []
