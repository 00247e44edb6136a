"""The instruments a watcher cannot attach, each named once with what was tried and how to point it.

A gap is a dict {"instrument", "message"}; the watcher prints each once (``depthlab.watch: blind spot:
...``), keeps them in ``watcher.gaps`` and in watch.json's ``blind_spots``:

| instrument | when                                                      | how to point it                         |
|------------|-----------------------------------------------------------|-----------------------------------------|
| attn       | no block parameter name matches attn / attention          | ``sublayers={"attn": "NAME"}`` or a callable |
| ffn        | no block parameter name matches the feed-forward patterns | ``sublayers={"ffn": "NAME"}``           |
| optimizer  | no optimizer given                                        | pass it, or call ``watcher.step(loss, lr=...)`` |
| logits     | the first logged step found no logits in the output       | ``logits=lambda output: ...`` or ``watcher.step(loss, logits=...)`` |
| loss       | the first logged step ended with no loss (none in the output, no ``watcher.step(loss)``) | ``watcher.step(loss)`` after each update |

(A model without a findable stack is refused at attach, naming what was tried and ``blocks=``.)
"""

from __future__ import annotations

from depthlab.probe.locate import StackInfo, missing_sublayers
from depthlab.watch.attention_stats import attention_module


def attach_gaps(stack: StackInfo, has_optimizer: bool, attention: bool) -> list[dict]:
    """The gaps known at attach time (sublayers, optimizer)."""
    named = stack.named[0] if stack.named else {}
    gaps = []
    for kind, message in missing_sublayers(stack).items():
        if kind == "attn" and attention and "attn" not in named:
            block = stack.blocks[0]
            if attention_module(block) is block:
                message += (
                    "; no submodule class is named *Attention either, so the attention scores are "
                    "looked for anywhere in the block"
                )
        gaps.append({"instrument": kind, "message": message})
    if not has_optimizer:
        gaps.append(
            {
                "instrument": "optimizer",
                "message": "no optimizer given: each watcher.step(loss) call ends an update, and lr stays "
                "None unless given (watcher.step(loss, lr=...)) or the optimizer is passed: "
                "depthlab.watch(model, optimizer)",
            }
        )
    return gaps


def logits_gap(output_type: type) -> dict:
    """The gap of a model whose training output (of ``output_type``) held no logits at the first
    logged step."""
    return {
        "instrument": "logits",
        "message": f"no output logits found in the model's output ({output_type.__name__}; tried its "
        "'logits' attribute or key, and a depthlab model's returned tensor): logit_lse stays None and "
        "output-logit-growth cannot fire. Point it: depthlab.watch(..., logits=lambda output: output) "
        "or watcher.step(loss, logits=logits)",
    }


def loss_gap(step: int) -> dict:
    """The gap of a loop whose first logged step (``step``) ended with no loss: the model's output held
    none (a model that returns logits) and ``watcher.step(loss)`` was not called."""
    return {
        "instrument": "loss",
        "message": f"no loss seen at step {step}: the model's output holds none (a model that returns logits) "
        "and watcher.step(loss) was not called, so the run gets no outcome and the loss rules cannot fire. "
        "Give it: watcher.step(loss) after each optimizer.step() (with depthlab.watch(...) as watcher:)",
    }
