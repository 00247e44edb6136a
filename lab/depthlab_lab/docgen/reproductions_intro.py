"""The words of docs/reproductions.md that no result decides: its title and first line (:data:`OPENING`),
and how a result is decided and counted, the rules it follows (:data:`INTRO`, in the appendix)."""

OPENING = (
    "# Reproductions",
    "",
    "Which claims of the source texts, and of the papers they rest on, hold at depthlab's small scale, and "
    "how sure we can be. One row per claim; its section below has the checks.",
    "",
)

INTRO = """\
What depthlab measured for each number of the source texts (the seeds) and each published claim they
rest on (docs/references.md, "Published results"), on the machine below. Each claim's expectation and
regime is a `Registration` in its module under `lab/depthlab_lab/reproduce/claims/`, fixed by the git commit that
first recorded its values (lab/tests/test_reproduce_registration.py checks each one against the history; a
date once typed by hand is shown as a label, not as its time). Most were recorded after single-seed
results had been seen: the registrations' notes and revisions say which. The code that computes and
decides each check is pinned as well; every later change to a value or to that code is a revision
listed at the end, with the old and new value, the reason, and whether results were known when it was
made. Each section opens with the claim as
its source states it, then its counts: the claim is what was tested, not what was found.

**Results.** A measurement over seeds is decided on its mean with a 95% interval ({method}, see
`depthlab/intervals.py` for why a t-interval and not a bootstrap at 3-5 seeds): **agree** when the whole
interval is on the expected side of the registered threshold, **MISMATCH** when all of it is on the other
side, **inconclusive** when it straddles the threshold; one seed alone is always inconclusive. Per-seed
values are shown beside every mean. A MISMATCH or an inconclusive result is a finding, not an error.
Where a check's registration puts its interval on a log scale (a positive multiplicative quantity: a
ratio, a mean squared value, a gradient norm), the t-interval is computed on log10 values and shown back
on the original scale as a geometric mean. A yes/no outcome per seed (a run diverged; the deepest depth
that trained lies in a range) is decided on the share of seeds that show it, with its exact binomial
(Clopper-Pearson) interval against the registered share (`lab/depthlab_lab/reproduce/shares.py`): a t-interval
does not fit a discrete quantity and unanimity is no interval. With three seeds such a check is
inconclusive whatever they show (3 of 3 gives [0.29, 1]); six unanimous seeds are the fewest that decide.
Two claims were first registered otherwise, and their first rule still decides: post-diverge on
unanimity (every seed diverged) and post-depth on a t-interval over the deepest depth that trained;
the share rule is their "revised" column.

**First registration and revised rules.** A rule changed after a check's results were known never
decides it: the result shown first is the one under the check's first registration, the column "revised"
gives the result under the revised rule and names the revision, and the counts are given under both.
The revised rules in use: a positive multiplicative quantity first registered on a linear interval is
decided there on a log scale; a paired difference decided against 0 needs a registered minimum effect
(0.02 nats for a loss difference, the seed noise final-norm registered, or the claim's own band for
"flat"); a finite final loss above ln V (worse than a uniform guess) counts as ln V; a close or no-worse
comparison is inconclusive when a side did not train; lr-sensitivity's formula counts a diverged run as
the loss at init whatever loss it stopped at. A check that a revision made with results known moved to
sanity counts, with its result, under the first registration, and is a sanity check under the revised
rules only.

**Chance.** At 95% per check, a check whose true value sat exactly on its threshold would read agree by
chance 2.5% of the time and MISMATCH 2.5% of the time; the summary says how many wrong results chance
alone would give over all counted checks. The column "Holm" gives each claim's results under Holm's
step-down rule over that claim's checks with an interval (family-wise error 5% per claim): a decided
result that does not survive it reads inconclusive there.

**Counts.** A check that holds by construction, cannot fail in its regime, or was added after the
results were known is a *sanity* check (under the first registration too: it was not part of it): it
still guards against bugs and is shown apart, but it is not counted. "N of M agree" counts only checks
that could have failed.

**The large scale** (`--scale large`: d_model 256, 2,000 to 10,000 steps, three seeds or more per setting)
is for a GPU, not for a CPU night. `python benchmarks/gpu.py --reproduce --dry-run` prints, from the
registrations alone, each claim's steps, seeds, tokens per run and what they are in passes over the
default corpus's training split (about 4.2 MB): 1.9 to 9.7 passes at the registered lengths, so the
corpus is too small for longer or wider runs without repeating itself. Each claim prints its expected
time on the machine at hand before it starts (`depthlab_lab.reproduce.cost`); `python benchmarks/gpu.py
--reproduce` runs the whole registered large scale in one command where a GPU is lent.

**Across sittings.** Each training run is stored in a run cache as it finishes, keyed by its configs,
the torch threads and version and a digest of the training code (not of the checks), and a later sitting
loads it instead of training it again: a loaded run is the trained one bit for bit (CPU runs only), so
a cut sitting resumes where it stopped. The lines below say how many runs this page trained and how many
it loaded; the record gives each run's commit. Across sessions (the cache is not kept), the page
accumulates from committed parts: each claim, as it finishes, writes its whole result to
`reproductions-parts/NAME.json` (with its plots), keyed by everything that decides it (its registration,
the scale, the torch version and threads, and the source of every module its code imports, the training
code among them; not the code that renders this page), and `depthlab reproduce all` loads each claim
whose part has today's key instead of running it. Each section says whether its claim was computed in
the sitting below or loaded from its part, and at which commit; `depthlab reproduce all --plan` lists
the claims still to run. To regenerate the page from nothing, delete the parts. `depthlab reproduce all
--render` runs nothing: it renders the page from every part whatever its key, and a claim whose code
changed since its part was computed says so in its section (it was not rerun).

**The scale ladder.** Each training claim on the scale ladder shows, after its checks, its effect sizes
at each width from the ladder's store (`reproductions-ladder.md` has the details and the steps per
width); the ladder's store is rebuilt from its committed record by `depthlab reproduce ladder --restore
docs/reproductions-ladder-runs.json`.

Every measured number on this page comes from the runs it records; the stated numbers are the sources'.
Every run and check behind it is recorded in the JSON file beside it (`reproductions-record.json`), from
which every result over seeds can be decided again without rerunning.
"""
