"""`--executor ray`: the smoke preset as Ray tasks on a local Ray instance; the driver writes the store."""

from __future__ import annotations

import io

import pytest

from depthlab.study import Store, preset, run_study

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'depthlab[ray]')")


@pytest.mark.slow
def test_smoke_preset_on_local_ray(tmp_path):
    db = str(tmp_path / "s.sqlite")
    study = preset("smoke")
    out = io.StringIO()
    res = run_study(study, db=db, workers=2, executor="ray", progress=False, out=out)
    assert not ray.is_initialized()  # the local instance it started is shut down again
    n = len(study.expand())
    assert (res.ran, res.failed) == (n, 0), out.getvalue()
    assert "(ray: 2 workers x" in out.getvalue()
    with Store(db) as s:
        runs = s.runs(res.study_id)
        assert all(r["status"] == "done" and r["outcome"] for r in runs)
        assert all(len(s.metrics(r["id"])) >= 3 for r in runs)
        assert all(r["host"] and r["seconds"] > 0 for r in runs)
    again = run_study(study, db=db, workers=2, executor="ray", progress=False, out=io.StringIO())
    assert (again.skipped, again.ran) == (n, 0)
