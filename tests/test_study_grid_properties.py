"""Properties of grid expansion (hypothesis): the runs are the product of the axes, in the grid's order,
less the repeats (which are said); a grid is refused at its first bad combination, before any run is
built past it; the grid's key and every run's key ignore the order of the keys in its file."""

from __future__ import annotations

import itertools
import math

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from depthlab import ConfigError
from depthlab.study import StudyConfig
from depthlab.study.runner import repeat_note

PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None)
BASE = {"model": {"d_model": 16, "n_heads": 2, "max_len": 32}, "train": {"steps": 2, "seq_len": 16}}

# axis name -> the values it may take: each valid alone on BASE, and some of them resolve to one run
# (1e-3 is lr's default, "1e-3" its YAML 1.1 spelling; qk_norm false its default)
VALID = {
    "n_layers": [1, 2, 3, 6],
    "wrap": ["pre", "post", "sandwich", "deepnorm"],
    "train.lr": [1e-3, "1e-3", 3e-3, 0.01],
    "seed": [0, 1, 2],
    "warmup": [0, 1],
    "variant": [{"qk_norm": False}, {"qk_norm": True}, {"qk_norm": True, "z_loss": 1e-4}],
}
# values that make some combinations invalid: heads that do not split d_model=16, a norm that
# DeepNorm cannot do without, and an option a wrapping does not read
INVALID = {
    "n_heads": [2, 3, 4],
    "norm": ["layernorm", "none"],
    "streams": [None, 2],
}


@st.composite
def grids(draw, pool: dict) -> dict:
    """A grid over 1 to 4 axes of ``pool``, each a non-empty list of its values (repeats allowed)."""
    names = draw(st.lists(st.sampled_from(sorted(pool)), min_size=1, max_size=4, unique=True))
    axes = {n: draw(st.lists(st.sampled_from(pool[n]), min_size=1, max_size=3)) for n in names}
    return {"name": "prop", **BASE, "axes": axes}


def _one(grid: dict, combo: dict):
    """The run of one combination built alone (its axes fixed to one value each), or its ConfigError."""
    try:
        return StudyConfig.from_dict({**grid, "axes": {k: [v] for k, v in combo.items()}}).expand()[0]
    except ConfigError as e:
        return e


def _combos(grid: dict) -> list[dict]:
    """Every combination of the grid's axes, first axis slowest."""
    names = list(grid["axes"])
    return [dict(zip(names, values)) for values in itertools.product(*grid["axes"].values())]


@PROPS
@given(grid=grids(VALID))
def test_the_runs_are_the_product_of_the_axes_in_order_less_the_repeats_which_are_said(grid):
    study = StudyConfig.from_dict(grid)
    runs = study.expand()
    assert study.count() == len(_combos(grid)) == math.prod(len(v) for v in grid["axes"].values())
    # each combination built alone, first occurrence kept: the same runs in the same order
    expected, seen = [], set()
    for combo in _combos(grid):
        run = _one(grid, combo)
        if run.hash not in seen:
            seen.add(run.hash)
            expected.append(run.hash)
    assert [r.hash for r in runs] == expected
    note = repeat_note(study, len(runs))
    if len(runs) < study.count():
        assert f"{study.count() - len(runs):,} of the grid's {study.count():,} combinations" in note
    else:
        assert note is None


@PROPS
@given(grid=grids({**VALID, **INVALID}))
def test_a_grid_is_refused_at_its_first_bad_combination_or_every_run_is_valid(grid):
    first_bad = next((e for c in _combos(grid) if isinstance(e := _one(grid, c), ConfigError)), None)
    try:
        runs = StudyConfig.from_dict(grid).expand()
    except ConfigError as e:
        assert first_bad is not None, f"refused a grid whose every combination builds: {e}"
        assert (e.field, e.value) == (first_bad.field, first_bad.value)
        assert e.field.startswith(("axes.", "model.", "train.")) or e.field in ("d_model", "norm")
        return
    assert first_bad is None, f"accepted a grid with a bad combination: {first_bad}"
    for r in runs:  # each resolved config rebuilds from its stored form
        assert type(r.model).from_dict(r.model.flat_dict()) == r.model
        assert type(r.train).from_dict(r.train.flat_dict()) == r.train


@PROPS
@given(grid=grids(VALID), data=st.data())
def test_keys_do_not_depend_on_the_order_of_the_keys_in_the_file(grid, data, tmp_path_factory):
    def shuffled(d):
        if not isinstance(d, dict):
            return d
        keys = data.draw(st.permutations(list(d)))
        return {k: shuffled(d[k]) if k != "axes" else d[k] for k in keys}

    # every mapping reordered but the axes themselves (their order is the runs' order)
    other = shuffled(grid)
    other["axes"] = {
        k: [shuffled(v) for v in vals] if k == "variant" else vals for k, vals in grid["axes"].items()
    }
    folder = tmp_path_factory.mktemp("grids")
    studies = []
    for i, g in enumerate((grid, other)):
        path = folder / f"g{i}.yaml"
        path.write_text(yaml.safe_dump(g, sort_keys=False))
        studies.append(StudyConfig.from_yaml(str(path)))
    a, b = studies
    assert a.config_hash() == b.config_hash()
    assert [r.hash for r in a.expand()] == [r.hash for r in b.expand()]
