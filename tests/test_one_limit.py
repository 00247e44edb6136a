"""One learning-rate limit everywhere: the probe's verdict, probe --compare's safe_lr column, depthlab
advise and a study's probe of the same run read one number (depthlab.doctor.lr_limit.limit_of on the
run's first batch), never three."""

from __future__ import annotations

import json
import re

import pytest

from depthlab import ModelConfig, TrainConfig
from depthlab.cli import main
from depthlab.doctor.lr_limit import limit_of
from depthlab.study.grid import RunSpec
from depthlab.study.worker import probe_run

pytestmark = pytest.mark.usefixtures("one_thread")
FLAGS = [
    "--layers",
    "3",
    "--d-model",
    "32",
    "--heads",
    "4",
    "--wrap",
    "post",
    "--lr",
    "2e-3",
    "--warmup",
    "10",
]


def test_probe_compare_advise_and_a_study_quote_the_same_safe_lr(capsys, tmp_path):
    study = limit_of(probe_run(RunSpec(ModelConfig(n_layers=3, d_model=32, n_heads=4, wrap="post"),
                                       TrainConfig(lr=2e-3, warmup=10))))[0].lr_limit  # fmt: skip
    assert main(["probe", *FLAGS, "--json", str(tmp_path / "p.json")]) == 0
    said = capsys.readouterr().out
    verdict = re.search(r"safe lr <= ([0-9.e-]+)", said).group(1)
    assert main(["probe", "--compare", *FLAGS[:6], "--wrap", "post,pre", *FLAGS[8:]]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("wrap=post"))
    assert main(["advise", *FLAGS, "--alternatives", "", "--json", str(tmp_path / "a.json")]) == 0
    advised = json.loads((tmp_path / "a.json").read_text())["limit"]["lr_limit"]
    assert f"{study:.2g}" == verdict == row.split()[4] == f"{advised:.2g}"
    assert advised == pytest.approx(study, rel=1e-12)
