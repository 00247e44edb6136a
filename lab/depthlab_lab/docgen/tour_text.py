"""The tour's sections: the argument of the four source texts, each with the depthlab commands that show it.

A section is prose (Markdown) and the commands whose real output :mod:`depthlab_lab.docgen.tour` captures
under it. ``{img}`` in a command is the folder of the tour's plots (docs/tour_img when the tour is
written; ``--plot {img}/NAME.png`` or, for a reproduction, ``--out {img}``), and every plot a command
reports on a ``plot: PATH`` line is shown under its output. Every command must be small (seconds on two
cores): lab/tests/test_tour.py runs them all. Every figure or trend the prose states about an output is
checked against that output (:mod:`depthlab_lab.docgen.tour_checks`).
The texts are cited by name (docs/sources.md): the stacks article ("Encoder and Decoder Stacks"), the
stream chapter (the residual-stream chapter, the dabbawalas), "Residual Connections Explained", and the
interview answer on residuals.
"""

from __future__ import annotations

from dataclasses import dataclass

# The small regime of `depthlab reproduce recipe`, where post-LN's need for warmup shows in 150 updates
# (8 layers, d_model 32, lr 3e-3; see lab/depthlab_lab/reproduce/claims/recipe.py for how it was chosen). One thread:
# a model this small gains nothing from a second one, and on a busy machine the two wait on each other.
TRAIN_SMALL = (
    "--layers 8 --d-model 32 --heads 4 --max-len 64 "
    "--steps 150 --batch-size 16 --seq-len 32 --lr 3e-3 --threads 1"
)


@dataclass(frozen=True)
class Section:
    """A title, the argument in prose, the commands (after ``depthlab``) and what to read in their output."""

    title: str
    text: str
    commands: tuple[str, ...]
    reading: str = ""


SECTIONS = (
    Section(
        "1. The repeated block",
        """An actual Transformer is a few distinct parts repeated many times (Vaswani et al. 2017, Attention Is All You Need). An encoder layer
has two sublayers, multi-head self-attention and a position-wise feed-forward network (512 wide, 2048
inside, in the original); a decoder layer adds a third, cross-attention, whose queries come from the
decoder's stream and whose keys and values come from the encoder's output, and its self-attention is
masked. Every sublayer is wrapped in "Add & Norm", once per sublayer, not once per layer. Only the
attention sublayers move information between positions. Because every sublayer returns the width it
received, a stack of 6 and a stack of 96 have the same shape, and the `+` of the residual lines up
(the stacks article, the stream chapter). The stream chapter counts one BERT-base feed-forward sublayer: 2 x 768 x 3072 = 4,718,592
weights, more than the whole attention sublayer at that width. `depthlab explain` prints the wiring
of any configuration, sublayer by sublayer.""",
        (
            "explain --arch encdec --layers 1 --d-model 512 --heads 8 --d-ff 2048 --wrap post",
            "explain --arch encoder --layers 12 --d-model 768 --heads 12 --wrap post --position sinusoidal",
        ),
        "One encoder layer has two wrapped sublayers and one decoder layer three, each `x = LN(x + F(x))`; "
        "the second command's 'one FFN' is the stream chapter's 4,718,592.",
    ),
    Section(
        "2. Why depth is hard",
        """Backpropagation multiplies the local derivatives of every operation between the loss and a
weight. If each of L layers contributes a factor below 1, the product shrinks geometrically and the
early layers stop learning; above 1, it explodes (the stacks article). The interview answer puts a number on it: a factor
0.5 per layer gives 0.5^32 = 2e-10 after 32 layers, and 48 random tanh layers of width 64 deliver a
gradient of 2.24e-11 to their input, against 2.50e+02 with skips. Residual Connections Explained pictures it as a message
whispered along fifty people. `depthlab reproduce seeds` recomputes every number the texts state
(including the stacks article's `gradient_by_depth` toy and the stream chapter's worked variance example) and prints it
beside the stated value; section 3 measures the same gradient, layer by layer, on a real stack.""",
        ("reproduce seeds --out {img}",),
        "Every number the texts state, recomputed: the gradient at the input of the interview answer's 48 tanh layers "
        "is 2.24e-11 without skips against 2.50e+02 with them, and the stacks article's toy loses orders of magnitude "
        "without the `+`. Three of the texts' qualitative statements do not hold on their own numbers (the "
        "MISMATCH rows): with the `+` the toy's values span far more than a small factor, the gradient "
        "that 'arrives intact' with skips arrives amplified, and doubling a did not nearly double Var(x1).",
    ),
    Section(
        "3. Residual connections: a layer writes an edit",
        """The fix changes what a layer computes: `y = x + F(x)` (the stacks article, Residual Connections Explained). The derivative is
`I + F'(x)` (Residual Connections Explained, the interview answer): expanding the product over the stack leaves one term that is the identity
alone, a route from the loss to every layer that passes through no weight matrix and no nonlinearity.
A layer that has nothing to add only needs `F(x) = 0`; it no longer has to learn the identity (Residual Connections Explained:
[0.5, 1.2, -0.3] + [0.1, -0.2, 0.4] = [0.6, 1.0, 0.1], the input survives). Forward, the same
sum is the residual stream, a bus of width d_model that every sublayer reads from and adds to (the stream chapter,
the interview answer). Each Transformer block has two skips; the interview answer's 48-layer code model lost one, the skip
around attention, and its bottom 20 layers received almost no gradient. `--no-residual` removes skips
and `probe --compare` lays the profiles side by side.""",
        (
            "probe --compare --layers 48 --d-model 64 --heads 4 --no-residual none,attn,all "
            "--plot {img}/residuals.png",
        ),
        "With both skips nothing vanishes: the gradient at the bottom is larger than at the top (g0/gL "
        "above 1; each pre-LN branch adds to what the identity path carries), not within a small factor of "
        "it. Without the attention skip alone the position-varying gradient reaching the bottom collapses "
        "(ctx0/ctxL far below 1e-3): the bottom layers are starved (the interview answer), which the doctor reports as "
        "`vanishing-gradient`. Training that model is `depthlab reproduce skip-ablation`.",
    ),
    Section(
        "4. Layer normalisation",
        """Adding a contribution of about the same size at every layer makes the stream's scale depend on
how deep a sublayer sits: the norm of a sum of L roughly independent contributions grows with L
(the stacks article). LayerNorm resets the scale per token, from that token's own d features:
`LN(x) = gamma (x - mean) / sqrt(var + eps) + beta`. No other token and no other item of the batch
enters, so, unlike BatchNorm, it computes the same thing at any batch size and in training and
inference (Ba et al. 2016, Layer Normalization). The division of labour: the addition carries information and gradient past
every layer, the normalisation fixes the scale of what each sublayer reads. The stream chapter asks (Q5) why
a pre-LN block cannot simply drop its norm: the stream's variance keeps growing and pushes every
sublayer's input away from where its weights were initialised; `--norm none` shows it.""",
        (
            "reproduce batchnorm --quick",
            "probe --compare --layers 48 --d-model 64 --heads 4 --norm layernorm,none "
            "--plot {img}/no_norm.png",
        ),
        "LayerNorm and RMSNorm outputs do not move when the rest of the batch changes; BatchNorm's do "
        "(rows that hold by the norms' definitions: sanity checks). Whether BatchNorm's train/eval mismatch "
        "shows as a larger gap between validation and training loss is the one counted check; `--quick` "
        "trains one seed, which decides nothing (inconclusive): the full reproduction runs five. Without "
        "a norm the stream rms climbs with depth far faster than with one (`depthlab reproduce no-norm`).",
    ),
    Section(
        "5. Where the norm goes",
        """The original Transformer normalises after the addition, `x = LN(x + F(x))` (post-LN, the
"Add & Norm" of its figure), and trains only with a careful recipe: 4000 warmup steps and Adam
beta2 = 0.98 (Vaswani et al. 2017). The texts explain it with Xiong et al. (2020): with the norm on the sum, the
gradient near the output at initialisation is large "and grows with depth", so the first steps
overshoot unless the learning rate starts small. Xiong et al.'s Theorem 1 says large but not growing:
post-LN's last-layer gradient is bounded independently of the depth, while pre-LN's shrinks like
L^-1/2; `reproduce init-scaling` below fits both against L and agrees with the theorem, not with the
texts' "grows". Moving the norm into the branch, `x = x + F(LN(x))` (pre-LN, GPT-2 on),
leaves the identity path unnormalised: the gradient passes through depth nearly unchanged and
warmup becomes optional (the stacks article, the stream chapter, the interview answer). The stream chapter calls "the placement is a detail" a
misconception: the two are different computations. Two qualifications (the stacks article): with tuned warmup,
post-LN slightly beats pre-LN at 6 layers, because pre-LN's identity path lets adjacent layers stay
similar and upper layers do less; and post-LN's instability is an engineering problem (section 7).
The texts predict: post-LN without warmup fails, with warmup it trains, pre-LN trains without. At
this tiny scale (8 layers of width 32, 150 updates, one seed each below) a missing warmup shows as a
stall at the unigram loss; one seed is an anecdote, and `depthlab reproduce recipe` repeats it over
five.""",
        (
            "probe --compare --wrap post,pre --layers 24 --d-model 64 --heads 4 --plot {img}/post_vs_pre.png",
            "reproduce init-scaling --quick --out {img}",
            f"train --wrap post --warmup 0 {TRAIN_SMALL}",
            f"train --wrap post --warmup 50 {TRAIN_SMALL}",
            f"train --wrap pre --warmup 0 {TRAIN_SMALL}",
        ),
        "In the init-scaling table, post-LN's `last_grad` slope is near 0 (flat in L) and pre-LN's near "
        "-0.5; one seed with `--quick`, so its results are inconclusive by rule (the full run has five). "
        "Each training run ends with one of four outcomes: `trained` (more than 5% below the unigram level), "
        "`undertrained` (more than 5% above it, still falling), `stalled` (within 5% of it, or above it and flat) or `diverged`; here they end as the "
        "texts predict: post-LN `stalled` without warmup and `trained` with it, pre-LN `trained` without. The whole "
        "grid of the recipe, warmup x beta2 and the Noam schedule over five seeds with its results, is "
        "`depthlab reproduce recipe` (its last full run is in docs/reproductions.md).",
    ),
    Section(
        "6. The final norm",
        """Pre-LN normalises only the copy of the stream each sublayer reads, never the stream, so the
stream grows with depth. The stream chapter traces one block by hand: x0 = [1, -1, 2, -2] (variance 2.5) leaves
with variance 4.3311, more than the 2.75 that independent contributions would give, because the
block adds something correlated with what it read. With 96 layers each adding unit variance, the
output's standard deviation would be sqrt(97) = 9.85 times the input's, and the stream chapter calls that a lower
bound: "the true growth runs faster". The 96-layer stack below, at initialisation, grows by less than
9.85 (the `stream-growth` verdict prints both); `depthlab reproduce stream-growth` checks both of the
seed's statements over several seeds. Whatever the factor, the unembedding was never trained on such a
scale, so every pre-LN model ends with one more norm after the last block (GPT-2's `ln_f`; the stream chapter's
Q6, the interview answer). `--final-norm off` removes it and the doctor says so.""",
        ("probe --layers 96 --d-model 64 --heads 4 --final-norm off --plot {img}/final_norm_off.png",),
        "The stream rms column climbs over the 96 layers (the `stream-growth` verdict gives the fitted "
        "exponent) and `missing-final-norm` is reported.",
    ),
    Section(
        "7. DeepNorm: going past a few hundred layers",
        """Pre-LN does not scale indefinitely: past a few hundred layers the stream has grown so much that
each late block changes it by a vanishing fraction, and the late blocks contribute little relative
to the early ones (the stream chapter). DeepNet (Wang et al. 2022) keeps the norm on the sum but scales the
stream up before adding, `x = LN(alpha x + G(x))`, and scales the branch's initial weights down by
beta; for a decoder of M layers alpha = (2M)^(1/4) and beta = (8M)^(-1/4), which at M = 64 is 3.36
and 0.210. DeepNet's argument is that each new layer's relative contribution is then about the same at
every depth, and the authors trained 1,000 layers; `depthlab reproduce collapse` tests that claim on
trained models (its results are in reproductions.md). The stacks article makes the same point: a post-norm variant with depth-scaled
branches trains to hundreds of layers, so post-norm's trouble is engineering, not a barrier. At 384
layers the probe puts the two side by side.""",
        (
            "explain --layers 64 --wrap deepnorm",
            "probe --compare --wrap pre,deepnorm --layers 384 --d-model 16 --heads 2 "
            "--plot {img}/deepnorm_384.png",
        ),
        "At initialisation pre-LN's stream rms climbs with the layer index, so each late block's write "
        "lands in an ever larger stream; DeepNorm's stays at unit scale and its gradient is level in depth "
        "(rmsL/rms0 and g0/gL near 1). The per-layer update ratio ||x_l - x_(l-1)|| / ||x_(l-1)|| and the "
        "share of the final stream that the last quarter of the layers wrote, at 48, 192 and 384 layers, "
        "at init and after training, are `depthlab reproduce collapse`.",
    ),
    Section(
        "8. What to take away",
        """The encoder and the decoder are one block with different sublayers, each wrapped in
add-and-normalise, and it stacks to any depth because every sublayer preserves d_model (Vaswani et al. 2017, Attention Is All You Need).
What makes depth trainable is the pair: the addition gives gradient and information a route that
survives every layer, and the normalisation keeps the scale each sublayer reads independent of how
deep it sits. Putting the norm inside the branch lets the identity route run unmediated, which
removed the original recipe's dependence on warmup (the stacks article, the stream chapter, the interview answer); but the stream then grows,
so pre-LN needs a final norm, and far enough down it needs rescaling again (DeepNorm). Depth buys
sequential computation, not quality by itself: the same identity path lets layers underuse
themselves, and every new depth regime can require revisiting how the residual branch is scaled
(the stacks article, the stream chapter). One command compares the wrappings on the same stack.""",
        (
            "probe --compare --wrap post,pre,sandwich,deepnorm,admin,rezero --layers 48 --d-model 32 "
            "--heads 4 "
            "--plot {img}/wrappings_48.png",
        ),
        "Read the verdict column: which wrappings a 48-layer stack can start from, and why.",
    ),
)
