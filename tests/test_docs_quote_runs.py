"""A number a page quotes from a command is the command's output today: docs/cli.md's advise example (the
post-LN 6 x 512 run that trained) is rerun and compared line by line, so a changed limit, predictor or
atlas cannot leave a stale number in the docs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from depthlab.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_advise_example_in_cli_md_is_what_advise_prints(capsys, one_thread):
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## `depthlab advise`", 1)[1]
    command, shown = re.findall(r"```\n(.*?)```", section, flags=re.S)[:2]
    argv = shlex.split(command.strip())
    assert argv[:2] == ["depthlab", "advise"]
    assert main(argv[1:]) == 0
    assert capsys.readouterr().out.strip() == shown.strip()


def test_cli_md_quotes_the_number_of_runs_advise_s_predictor_was_chosen_on():
    from depthlab.doctor.record import load_record

    text = (ROOT / "docs" / "cli.md").read_text()
    quoted = re.search(r"chosen by cross-validation on ([\d,]+) measured runs", text)
    assert quoted and int(quoted[1].replace(",", "")) == load_record()["predictor"]["examples"]
