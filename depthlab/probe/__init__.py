"""Probe any Transformer stack at init: gradient by depth, stream growth, layer usefulness, and verdicts.

from depthlab.probe import probe
result = probe(model, tokens)          # depthlab, Hugging Face or torch.nn.Transformer* model
print(result.format()); result.to_dict()   # the Probe JSON of docs/design.md
"""

from depthlab.doctor.checks import diagnose
from depthlab.probe.forward_backward import LOSSES, measure, probe
from depthlab.probe.result import ProbeResult

__all__ = ["LOSSES", "ProbeResult", "diagnose", "measure", "probe"]
