"""examples/depthlab_tour.ipynb: committed without outputs, and executed here cell by cell in a real
Jupyter kernel (nbclient), failing on any cell error; its results must display as tables and images."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "depthlab_tour.ipynb"
CELL_TIMEOUT_S = 400  # the study cell (four runs, two at a time) is the longest: 5-15 s on 2 shared cores


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_committed_notebook_has_no_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, c in enumerate(_code_cells(nb)) if c.outputs or c.execution_count is not None]
    assert not dirty, (
        f"code cells {dirty} hold outputs: clear them before committing (Jupyter: Clear All Outputs)"
    )


def _cell(nb, text: str):
    """The one code cell whose source contains ``text``."""
    found = [c for c in _code_cells(nb) if text in c.source]
    assert len(found) == 1, f"{len(found)} code cells contain {text!r}"
    return found[0]


def _shown(nb, text: str) -> set[str]:
    """The MIME types the cell containing ``text`` displayed."""
    return {kind for o in _cell(nb, text).outputs if "data" in o for kind in o["data"]}


def _html(nb, text: str) -> str:
    """The HTML the cell containing ``text`` displayed."""
    return "".join(o["data"].get("text/html", "") for o in _cell(nb, text).outputs if "data" in o)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_notebook_runs_and_its_results_display_themselves(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.time()
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env={**os.environ, "TMPDIR": str(tmp_path)})  # raises on any cell's error
    print(f"notebook executed in {time.time() - start:.0f} s")
    assert "<table>" in _html(nb, "explain(post.replace") and "residual off for attn" in _html(
        nb, "explain(post"
    )
    assert "log scale: 5 decades" in _html(nb, "probe = probe_config") and "warmup-required" in _html(
        nb, "probe = probe_"
    )
    assert "rms_growth" in _html(nb, "comparison = compare")
    assert "image/png" in _shown(nb, "comparison.figure(")
    assert "depthlab training run" in _html(nb, "run = train(")
    assert "dataframe" in _html(nb, "run.to_pandas()") and "dataframe" in _html(nb, "study.runs()")
    study = _html(nb, 'study = store.study("post-vs-pre")')
    assert "depthlab study post-vs-pre" in study and "4 runs:" in study and "8 layers" in study
    for name in ("loss_curves", "layer_profiles"):
        assert "image/png" in _shown(nb, f'study.figure("{name}")')
    work = [p for p in tmp_path.iterdir() if p.name.startswith("depthlab-notebook-")]
    assert len(work) == 1 and (work[0] / "report" / "index.html").is_file()
