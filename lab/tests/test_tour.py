"""docs/tour.md: every command it shows still runs, and the document matches the commands of the template.

The slow test runs each tour command in a fresh process, exactly as ``depthlab reproduce tour`` does
(plots into a temporary folder). The commands are chosen to take seconds each.
"""

from __future__ import annotations

import os
import re

import pytest

from depthlab_lab.docgen.tour import (
    IMG,
    Ran,
    excerpt,
    outputs_in,
    plots_in,
    render,
    repo_root,
    run_command,
    tour_commands,
)
from depthlab_lab.docgen.tour_checks import PROSE_CHECKS, contradicted
from depthlab_lab.docgen.tour_text import SECTIONS
from depthlab_lab.reproduce import load_all

CLI_COMMANDS = ("explain", "probe", "train", "reproduce")


def test_sections_follow_the_argument():
    titles = [s.title.split(". ", 1)[1].lower() for s in SECTIONS]
    for topic in (
        "repeated block",
        "why depth",
        "residual",
        "normalisation",
        "where the norm",
        "final norm",
        "deepnorm",
        "take away",
    ):
        assert any(topic in t for t in titles), topic
    assert all(s.commands for s in SECTIONS)


def test_commands_are_cli_commands_with_plots_under_img():
    for command in tour_commands():
        argv = command.split()
        assert argv[0] in CLI_COMMANDS, command
        for i, arg in enumerate(argv):
            if "{img}" in arg:
                plot = argv[i - 1] == "--plot" and arg.startswith("{img}/") and arg.endswith(".png")
                out = argv[0] == "reproduce" and argv[i - 1] == "--out" and arg == "{img}"
                assert plot or out, command


def test_excerpt_keeps_short_outputs_and_cuts_long_ones_in_the_middle():
    assert excerpt("a\nb\n\n") == "a\nb"
    text = "\n".join(str(i) for i in range(100))
    cut = excerpt(text, max_lines=10).splitlines()
    assert cut[:5] == ["0", "1", "2", "3", "4"] and cut[-5:] == ["95", "96", "97", "98", "99"]
    assert cut[5] == "... (90 lines left out) ..."


def test_render_places_each_output_under_its_command():
    commands = tour_commands()
    results = [
        Ran(f"depthlab {c.format(img='docs/' + IMG)}", 0, f"output {i}\n", "", 0.1)
        for i, c in enumerate(commands)
    ]
    results[1].stdout += f"plot: docs/{IMG}/residuals.png\n  plot: runs/elsewhere.png\n"
    text = render(results, 12.0)
    for i, r in enumerate(results):
        assert f"$ {r.command}\noutput {i}\n" in text
    assert f"```\n\n![residuals.png]({IMG}/residuals.png)\n" in text
    assert text.count("![") == 1  # only plots under the tour's folder are shown
    assert text.index(SECTIONS[0].title) < text.index(SECTIONS[-1].title)
    assert all(s.reading in text for s in SECTIONS)


def test_the_footer_sends_an_editor_to_the_prose_file_that_exists():
    """The page says not to edit it by hand but to change the prose: the file it names must be that prose."""
    results = [Ran(f"depthlab {c}", 0, "out\n", "", 0.1) for c in tour_commands()]
    footer = render(results, 1.0).rstrip().splitlines()[-1]
    named = re.search(r"change (\S+) and regenerate", footer)
    assert named, footer
    path = repo_root() / named.group(1)
    assert path.is_file(), f"the tour's footer names {named.group(1)}, which is not a file of the checkout"
    assert "SECTIONS" in path.read_text()  # the sections' prose, not some other file of that name


def test_plots_in_reads_the_plot_lines_under_the_tour_folder():
    stdout = f"table\nplot: docs/{IMG}/a.png\n  plot: docs/{IMG}/seeds/b.png\nplot: runs/c.png\n"
    assert plots_in(stdout) == [f"{IMG}/a.png", f"{IMG}/seeds/b.png"]


def test_the_tour_is_a_document_not_a_claim():
    assert "tour" not in load_all() and "all" not in load_all()


def test_document_shows_exactly_the_template_commands():
    """docs/tour.md is regenerated whenever tour_text.py changes (`depthlab reproduce tour`)."""
    path = repo_root() / "docs" / "tour.md"
    assert path.is_file(), "docs/tour.md is missing: run `depthlab reproduce tour`"
    text = path.read_text()
    shown = [line[len("$ depthlab ") :] for line in text.splitlines() if line.startswith("$ depthlab ")]
    assert shown == [c.format(img=f"docs/{IMG}") for c in tour_commands()]
    for line in text.splitlines():
        if line.startswith("![") and f"]({IMG}/" in line:
            assert (path.parent / line[line.index("(") + 1 : -1]).is_file(), line


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", tour_commands(), ids=lambda c: c.split(" --plot")[0].replace(" ", "_")[:70]
)
def test_tour_command_runs(command, tmp_path):
    ran = run_command(command, str(tmp_path), repo_root())
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip(), "the tour shows this command's output; it printed nothing"
    if "{img}" in command:
        written = plots_in(ran.stdout)  # run_command shows tmp_path as docs/tour_img
        assert written, "the command names the tour's plot folder but reported no plot"
        for path in written:
            assert os.path.getsize(tmp_path / path[len(IMG) + 1 :]) > 5_000


def test_prose_is_borne_out_by_the_outputs_beside_it():
    """Every figure or trend the prose states about an output holds in the committed docs/tour.md."""
    text = (repo_root() / "docs" / "tour.md").read_text()
    outputs = outputs_in(text)
    assert len(outputs) == len(tour_commands())
    assert contradicted(outputs) == []
    assert {(c.section, c.command) for c in PROSE_CHECKS} <= set(outputs)


def test_a_contradicting_output_is_caught():
    text = (repo_root() / "docs" / "tour.md").read_text()
    outputs = outputs_in(text)
    key = next((c.section, c.command) for c in PROSE_CHECKS if "without warmup stalls" in c.statement)
    broken = {**outputs, key: outputs[key].replace("stalled", "trained", 1)}
    assert contradicted(broken) == [f"section {key[0]}, command {key[1]}: post-LN without warmup stalls"]
    growth = next((c.section, c.command) for c in PROSE_CHECKS if "less than 9.85" in c.statement)
    faster = {**outputs, growth: re.sub(r"\(x[0-9.]+\)", "(x10.2)", outputs[growth], count=1)}
    assert any("less than 9.85" in w for w in contradicted(faster))
    unreadable = {**outputs, growth: "nothing here"}
    assert any("could not read it" in w for w in contradicted(unreadable))
