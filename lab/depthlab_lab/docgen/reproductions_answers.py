"""The first screen of docs/reproductions.md: one row per claim in plain words, its result at the
largest scale measured, how it moved with width, what was known when it was registered, and a link to
its section; then how to read the page and the headline counts, by the kind of evidence they are.

Every number comes from the claims' results (their checks), the ladder's store (the effects at each
width, :mod:`depthlab_lab.docgen.reproductions_ladder`) and the evidence table
(:mod:`depthlab_lab.reproduce.evidence`); the words of each row are :data:`PLAIN`'s.
"""

from __future__ import annotations

from depthlab.intervals import AGREE, INCONCLUSIVE, MISMATCH
from depthlab_lab.reproduce.evidence import BLIND, EVIDENCE, KINDS, SAID, SEEDS_KNOWN, SOME_KNOWN, TEXTBOOK
from depthlab_lab.reproduce.ladder import SEEDS, WIDTHS
from depthlab_lab.reproduce.reproduction import Reproduction, counts

# Each claim as a reader would put it: what the source says, in a line (the claim, not the result).
PLAIN = {
    "seeds": "every number the source texts state, recomputed",
    "init-scaling": "at init, gradients and the stream scale with depth as Xiong et al. derive",
    "stream-growth": "at init, pre-LN's stream grows faster than independent additions",
    "stream-trained": "in trained pre-LN stacks, the stream grows faster than independent additions",
    "batchnorm": "BatchNorm's train/eval mismatch shows in validation; LayerNorm has none",
    "batchnorm-same": "the same mismatch, both losses measured on the final model",
    "no-norm": "pre-LN without its norm explodes at init and trains worse",
    "no-residual": "without skips, extra layers make a stack worse; with skips they do not",
    "recipe": "post-LN needs warmup and Adam beta2 0.98; pre-LN needs neither",
    "original-shape": "the 6-layer base model fails without its warmup and trains with it",
    "original-peak": "the same at the same peak learning rate: the warmup alone decides",
    "warmup": "post-LN needs warmup; pre-LN does not",
    "shallow-post": "at 6 layers with a tuned warmup, post-LN ends as good as pre-LN",
    "post-depth": "post-LN stops training between 16 and 24 layers",
    "post-diverge": "deep post-LN without warmup diverges",
    "post-fails": "24-layer post-LN without warmup fails at every lr; pre-LN trains",
    "depth": "at 24 and 48 layers post-LN fails where pre-LN, DeepNorm, Admin and ReZero train",
    "model-update": "the output's first updates grow with depth for post-LN, not for DeepNorm",
    "model-update-stream": "the same on the stream before any final norm, post-LN's faster than pre-LN's",
    "jacobian": "at 128 layers the Jacobian vanishes for post-LN, grows for pre-LN, stays near 1 for ReZero",
    "collapse": "at hundreds of layers pre-LN's late layers stop contributing; DeepNorm's do not",
    "skip-ablation": "48 layers without the attention skip stall near unigram, bottom layers starved",
    "final-norm": "pre-LN needs its final norm: without it the output's scale grows and loss is worse",
    "redundancy": "trained pre-LN's deep layers change the stream least and cost least when removed",
    "dyt": "DyT in place of LayerNorm trains as well at small scale",
    "coord-depth": "across depth the stream stays flat under depth-muP and CompleteP, grows under SP",
    "lr-reference": "post-LN's lr sensitivity grows with depth faster than pre-LN's (common reference)",
    "lr-sensitivity": "lr sensitivity grows with depth, faster for post-LN; warmup, qk-norm, z-loss lower it",
    "lr-transfer-depth": "the best lr stays put across depth under CompleteP and falls under SP",
    "width-transfer": "the best lr stays put across width under muP and falls as 1/width under SP",
}
# The "known at registration" column: what of the claim's own results had been seen.
SHORT = {
    BLIND: "nothing (blind)",
    SEEDS_KNOWN: "its runs on other seeds",
    SOME_KNOWN: "some of its results",
    TEXTBOOK: "textbook arithmetic",
}
RESULTS = (AGREE, MISMATCH, INCONCLUSIVE)


def plain(p: Reproduction, fn) -> str:
    """Claim ``p`` in plain words: :data:`PLAIN`'s, else its function's docstring's first line."""
    return PLAIN.get(p.name) or ((fn.__doc__ or p.name).strip().splitlines()[0].rstrip("."))


def tally(n: dict) -> str:
    """ "24 of 27 agree, 3 MISMATCH" from counts by result (the counted checks or effects)."""
    total = sum(n[k] for k in RESULTS)
    extra = [f"{n[k]} {k}" for k in (MISMATCH, INCONCLUSIVE) if n[k]]
    return ", ".join([f"{n[AGREE]} of {total} agree", *extra])


def _at_scale(ladder) -> str:
    """The result at the largest scale measured, for a claim on the ladder: its effects at the widest
    width ("-" for a claim that is not on it)."""
    if ladder is None or not ladder.effects:
        return "-"
    return f"d_model {ladder.width}: {tally(ladder.results)}"


def _with_width(ladder) -> str:
    if ladder is None:
        return "not on the ladder"
    moved = [f"{ladder.trends[k]} {k}" for k in ("toward", "away", "flat") if ladder.trends[k]]
    return ", ".join(moved) if moved else "one width only"


def answer_rows(parts: list[Reproduction], registry: dict, ladder: dict) -> list[str]:
    """The page's opening table: a row per claim (``ladder``: {claim: LadderAnswer} of those on it)."""
    lines = [
        "| claim | registered checks | at the widest width measured | with width | known at registration "
        "| section |",
        "|---|---|---|---|---|---|",
    ]
    for p in parts:
        kind = EVIDENCE[p.name].kind if p.name in EVIDENCE else None
        at = ladder.get(p.name)
        lines.append(
            f"| {plain(p, registry[p.name])} | {tally(counts(p.checks))} | {_at_scale(at)} "
            f"| {_with_width(at)} | {SHORT.get(kind, 'not filed')} | [{p.name}](#{p.name}) |"
        )
    return lines


def reading() -> list[str]:
    """How to read the page, in a few short sentences."""
    return [
        "## How to read this",
        "",
        "Each claim is decided by checks registered in its code: a threshold, a regime and its seeds. A "
        "check reads a mean over seeds with its 95% interval. It **agrees** when the whole interval is on "
        "the claim's side of the threshold, reads **MISMATCH** when all of it is on the other side, and "
        "is **inconclusive** when it straddles the threshold.",
        "",
        "The second column counts the claim's checks in its registered regime. For a training claim on "
        f"the scale ladder, the third gives its effects at the widest width measured (d_model {max(WIDTHS)}, "
        f"{len(SEEDS)} seeds): the quantities its checks decide, on a cheaper subset of its runs "
        "([the ladder page](reproductions-ladder.md) says where they differ). The fourth counts the "
        "effects that moved toward the claim with width, away from it, or not beyond their intervals "
        "(flat).",
        "",
        "The fifth says what kind of evidence the checks are. Only a blind check is a prediction. The "
        "others replicate, on new seeds, what had been seen, or recompute a textbook's numbers. The "
        "appendix gives each claim's reason, its registration, every revision and the pinned code.",
        "",
    ]


def evidence_table(parts: list[Reproduction]) -> list[str]:
    """The counted checks by kind of evidence (the claims filed in :data:`EVIDENCE`), under the first
    registrations: how many, and how many agree, MISMATCH or stay inconclusive."""
    rows = {k: dict.fromkeys(RESULTS, 0) for k in (*KINDS, None)}
    claims = {k: 0 for k in rows}
    for p in parts:
        kind = EVIDENCE[p.name].kind if p.name in EVIDENCE else None
        n = counts(p.checks)
        claims[kind] += 1
        rows[kind] = {k: rows[kind][k] + n[k] for k in RESULTS}
    lines = [
        "| counted checks | claims | checks | agree | MISMATCH | inconclusive |",
        "|---|---|---|---|---|---|",
    ]
    for kind in (*KINDS, None):
        if not claims[kind]:
            continue
        n = rows[kind]
        lines.append(
            f"| {SAID.get(kind, 'not filed')} | {claims[kind]} | {sum(n.values())} | {n[AGREE]} "
            f"| {n[MISMATCH]} | {n[INCONCLUSIVE]} |"
        )
    return lines


def evidence_reasons(parts: list[Reproduction]) -> list[str]:
    """Each claim's kind of evidence with the registration's words that decide it (appendix)."""
    lines = [
        "### What was known at registration",
        "",
        "Each claim's kind of evidence, read from its registration's notes and revisions "
        "(`lab/depthlab_lab/reproduce/evidence.py`; lab/tests/test_evidence.py checks each quote).",
        "",
        "| claim | kind | counted checks | the registration says | so |",
        "|---|---|---|---|---|",
    ]
    for p in parts:
        e = EVIDENCE.get(p.name)
        n = counts(p.checks)
        counted = sum(n[k] for k in RESULTS)
        if e is None:
            lines.append(f"| [{p.name}](#{p.name}) | not filed | {counted} | - | - |")
            continue
        quote = e.quote.replace("|", "\\|")
        lines.append(f'| [{p.name}](#{p.name}) | {e.kind} | {counted} | "{quote}" | {e.reason} |')
    return lines + [""]
