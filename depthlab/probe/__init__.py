"""Probe any Transformer stack at init: gradient by depth, stream growth, layer usefulness, and verdicts.

from depthlab.probe import probe
result = probe(model, tokens)          # depthlab, Hugging Face or torch.nn.Transformer* model
print(result.format()); result.to_dict()   # the Probe JSON of docs/design.md
"""

from depthlab.probe.doctor import diagnose
from depthlab.probe.probe import LOSSES, measure, probe
from depthlab.probe.result import ProbeResult

__all__ = ["LOSSES", "ProbeResult", "diagnose", "measure", "probe"]
