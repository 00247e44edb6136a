"""What was known of each claim's results when it was registered: the kind of evidence its checks are.

A count of checks that agree reads as a count of predictions only where nothing of the runs had been
seen. Each registration says what was known in its notes and in each revision's ``results_known``;
this table reads them once per claim and files the claim under one kind:

- ``blind``: registered before any run of the configurations its checks read (results of other
  configurations, other widths or other claims may have been known: the reason says which);
- ``seeds known``: runs of the same configurations had been seen on other seeds (seed 0, or seeds
  0-2 or 0-4) before the registration, or before the revision that moved the claim onto seeds; its
  checks replicate on the other seeds what was seen on those;
- ``some known``: one result, or the outcomes of a few of its runs, had been seen;
- ``textbook``: arithmetic on the numbers the source texts state (no run at all).

``quote`` is the words of the registration (its notes, or a revision's ``results_known``) that decide
the kind; lab/tests/test_evidence.py checks that each quote is there and that every registered claim is
filed. A rule changed with results known, shown beside the first registration and never deciding
(the "revised" column), does not change a claim's kind: the first registration decides.
"""

from __future__ import annotations

from dataclasses import dataclass

BLIND, SEEDS_KNOWN, SOME_KNOWN, TEXTBOOK = "blind", "seeds known", "some known", "textbook"
KINDS = (BLIND, SEEDS_KNOWN, SOME_KNOWN, TEXTBOOK)
# How the page names each kind, in a table's first column.
SAID = {
    BLIND: "registered before any run of its configurations (blind)",
    SEEDS_KNOWN: "registered with seed 0 (or seeds 0-2, 0-4) of the same runs known",
    SOME_KNOWN: "registered with one result, or a few runs' outcomes, known",
    TEXTBOOK: "arithmetic on the source texts' numbers",
}


@dataclass(frozen=True)
class Evidence:
    """A claim's kind of evidence, the registration's words that decide it, and why, in a sentence."""

    kind: str
    quote: str
    reason: str


EVIDENCE = {
    "seeds": Evidence(
        TEXTBOOK,
        "the inputs are the texts' own numbers",
        "every check recomputes a number the texts state from the texts' own inputs",
    ),
    "init-scaling": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0's slopes known; a threshold was revised with seed 0's slope known",
    ),
    "stream-growth": Evidence(
        SOME_KNOWN,
        "Registered with one relevant result known",
        "the tour's probe of a 96-layer pre-LN stack had shown the stream's growth",
    ),
    "stream-trained": Evidence(
        BLIND,
        "Registered before any of its runs; no trained stack's ratio had been measured",
        "only the ratio at init (another claim) and which depths train were known",
    ),
    "batchnorm": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0's gaps known",
    ),
    "batchnorm-same": Evidence(
        SEEDS_KNOWN,
        "the batchnorm claim's results for seeds 0-4",
        "the same configurations' runs on seeds 0-4 had been seen; its checks run seeds 5-9",
    ),
    "no-norm": Evidence(
        SOME_KNOWN,
        "Registered with one relevant result known",
        "the tour's probe of a 48-layer pre-LN stack without norms had shown the stream exploding",
    ),
    "no-residual": Evidence(
        BLIND,
        "Registered before any run without skips at these depths",
        "no run of its configurations had been seen",
    ),
    "recipe": Evidence(
        SEEDS_KNOWN,
        "yes for seeds 0, 1, 2",
        "its regime was chosen with seed 0's pilot known; moved onto seeds with seeds 0-2 known",
    ),
    "original-shape": Evidence(
        BLIND,
        "Registered before any run at this shape",
        "no run of its configurations had been seen",
    ),
    "original-peak": Evidence(
        BLIND,
        "Registered before any of its runs",
        "original-shape's runs at this shape were known; their no-warmup run started at a ten times "
        "larger lr, not at this claim's peak",
    ),
    "warmup": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "its regime was chosen with seed 0's pilot known; moved onto seeds with seed 0 known",
    ),
    "shallow-post": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0's result known",
    ),
    "post-depth": Evidence(
        SOME_KNOWN,
        "Known beforehand, from other claims at this scale",
        "the outcomes of 24-layer, 8-layer and 12-layer post-LN runs in other claims were known",
    ),
    "post-diverge": Evidence(
        SOME_KNOWN,
        "the lr 1e-3 row's outcome was known",
        "one of its four rows' outcome was known from the depth claim",
    ),
    "post-fails": Evidence(
        SEEDS_KNOWN,
        "the post-diverge claim's runs of the same configurations with seeds 0-2",
        "the same configurations' runs on seeds 0-2 had been seen; its checks run seeds 3-5",
    ),
    "depth": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "150 steps chosen with seed 0's pilot known; moved onto seeds with seed 0 known",
    ),
    "model-update": Evidence(
        SEEDS_KNOWN,
        "yes for seeds 0, 1, 2",
        "its lr was chosen with seed 0's pilot known; moved onto seeds with seeds 0-2 known",
    ),
    "model-update-stream": Evidence(
        SEEDS_KNOWN,
        "the model-update claim's results for seeds 0-4",
        "for post-LN and DeepNorm the same quantity had been seen on seeds 0-4 (Admin's comparison is "
        "new); its checks run seeds 5-9",
    ),
    "jacobian": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 known; two thresholds set after one exploratory trial",
    ),
    "collapse": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 (an earlier training loop) known",
    ),
    "skip-ablation": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 known; seed 0's loss curves had been shown",
    ),
    "final-norm": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 known",
    ),
    "redundancy": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 known",
    ),
    "dyt": Evidence(
        SEEDS_KNOWN,
        "yes for seed 0",
        "moved onto seeds with seed 0 known",
    ),
    "coord-depth": Evidence(
        BLIND,
        "Registered before any run at width 32",
        "the same check at widths 64 and 128 was known; its expectations are the theory's",
    ),
    "lr-reference": Evidence(
        SEEDS_KNOWN,
        "the lr-sensitivity preset's curves (seeds 0-2)",
        "the same configurations' curves on seeds 0-2 had been seen; its checks run seeds 3-5",
    ),
    "lr-sensitivity": Evidence(
        SOME_KNOWN,
        "yes: the preset's 24-layer runs (outcomes only; no check had been computed)",
        "its learning rates were widened after the 24-layer runs' outcomes were seen",
    ),
    "lr-transfer-depth": Evidence(
        SEEDS_KNOWN,
        "seeds 0-2",
        "the same runs at 2, 4 and 8 layers had been seen on seeds 0-2; its checks run seeds 3-5 and add "
        "16 layers",
    ),
    "width-transfer": Evidence(
        SEEDS_KNOWN,
        "The results of this regime with seeds 0-2 were known when it was registered",
        "a replication on seeds 3-5 of a measurement seen on seeds 0-2",
    ),
    "hc-gain": Evidence(
        BLIND,
        "Nothing was known at width 64, at 6 to 48 layers, or over seeds",
        "one run of each design at 64 layers had been seen; its checks read 6 to 48 layers on three seeds",
    ),
    "topology-stream": Evidence(
        BLIND,
        "Registered before any of its runs",
        "only probes at init had been seen (its init values are sanity checks, not counted)",
    ),
    "value-residual": Evidence(
        BLIND,
        "no value-residual model had been trained in depthlab",
        "no value-residual model had been trained before its runs",
    ),
}


def said_by(registration) -> str:
    """Everything ``registration`` says of what was known: its notes and each revision's
    ``results_known`` (the text a quote is looked up in)."""
    return "\n".join([registration.notes, *(r.results_known for r in registration.revisions)])


def kind_of(name: str) -> str | None:
    """Claim ``name``'s kind of evidence (None when the table does not file it)."""
    e = EVIDENCE.get(name)
    return e.kind if e else None
