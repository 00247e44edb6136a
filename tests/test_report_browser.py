"""The report in a real browser: headless Chromium loads index.html offline; every image loads, no console errors.

A copy of the page gets a small script that, on the load event, writes into the DOM how many images
there are, which failed to load, and any error or console.error seen; ``--dump-dom`` prints that DOM.
Chromium's own console log (``--enable-logging=stderr``) is checked too.

Without chromium these tests FAIL (a green suite must mean the page was rendered): install it
(``make chromium``, i.e. Debian's ``apt-get install -y chromium``), or opt out explicitly with
``DEPTHLAB_SKIP_BROWSER=1``, which skips them and says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from test_study_fakes import fake_study, fill_store, lr_task

from depthlab.report import write_report
from depthlab.study import StudyConfig

OPT_OUT = "DEPTHLAB_SKIP_BROWSER"

pytestmark = pytest.mark.browser


def chromium() -> str:
    """The chromium binary on PATH (Debian: /usr/bin/chromium). Fails the test when there is none, unless
    the run opted out with DEPTHLAB_SKIP_BROWSER=1 (then the test is skipped, saying so)."""
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(f"browser test opted out ({OPT_OUT}=1): the report was not rendered in chromium")
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "headless chromium is not installed, so the report cannot be checked in a browser. Install it "
            "(`make chromium`, or as root `apt-get install -y chromium`), or opt out explicitly with "
            f"{OPT_OUT}=1.",
            pytrace=False,
        )
    return found


CHECK = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message || (e.target && e.target.src) || e)), true);
const _error = console.error;
console.error = (...a) => { window.__errors.push(a.join(" ")); _error(...a); };
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute("src"));
  const out = document.createElement("pre");
  out.id = "depthlab-check";
  out.textContent = JSON.stringify({images: imgs.length, broken: broken, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
    "--dump-dom",
]


def render_in_chromium(browser: str, page: str, profile: str) -> tuple[dict, list[str]]:
    """(the check's JSON, chromium's console log lines) for the page at ``page``, rendered by ``browser``."""
    proc = subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", f"file://{page}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="depthlab-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the page did not finish loading in chromium:\n{proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&")), console


def _instrumented_copy(index: str) -> str:
    html = open(index, encoding="utf-8").read()
    assert "<head>" in html
    path = index.replace("index.html", "browser-check.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(html.replace("<head>", "<head>" + CHECK, 1))
    return path


def test_report_renders_offline_with_every_image(tmp_path):
    browser = chromium()
    db = str(tmp_path / "s.sqlite")
    fill_store(db, fake_study())
    index = write_report(db, str(tmp_path / "report"))
    n_images = open(index, encoding="utf-8").read().count("<img ")
    result, console = render_in_chromium(browser, _instrumented_copy(index), str(tmp_path / "profile"))
    assert result == {"images": n_images, "broken": [], "errors": []} and n_images == 4
    assert console == []


def test_the_check_catches_a_broken_image(tmp_path):
    """The browser check can fail: a report whose figure is missing is caught."""
    browser = chromium()
    db = str(tmp_path / "s.sqlite")
    fill_store(db, fake_study())
    index = write_report(db, str(tmp_path / "report"))
    (tmp_path / "report" / "loss_curves.png").unlink()
    result, _ = render_in_chromium(browser, _instrumented_copy(index), str(tmp_path / "profile"))
    assert result["broken"] == ["loss_curves.png"] and result["errors"]


def test_run_page_renders_offline_with_every_image(tmp_path):
    """depthlab report --run on a watched loop's folder: the heatmaps, the loss with its warnings and the
    attention curves load in chromium."""
    browser = chromium()
    import torch

    import depthlab
    from depthlab import ModelConfig, build_model
    from depthlab.report import write_run_report

    torch.manual_seed(0)
    model = build_model(ModelConfig(n_layers=3, d_model=32, n_heads=4, max_len=32, wrap="post"))
    opt = torch.optim.Adam(model.parameters(), lr=0.3)  # far too high: warnings to mark
    with depthlab.watch(model, opt, every=2, out=str(tmp_path / "run"), echo=None) as w:
        for t in range(12):
            x = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(t))
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad()
            w.step(loss)
    assert w.warnings
    index = write_run_report(str(tmp_path / "run"))
    html = open(index, encoding="utf-8").read()
    assert all(x["code"] in html for x in w.warnings)
    result, console = render_in_chromium(browser, _instrumented_copy(index), str(tmp_path / "profile"))
    assert result == {"images": 3, "broken": [], "errors": []} and console == []


def test_a_learning_rate_study_renders_its_curves_and_tables(tmp_path):
    """A study with a learning-rate axis: the final loss against learning rate (one panel per wrapping,
    a line per depth), the sensitivity table, the slope and the recommendation, all loaded in chromium."""
    browser = chromium()
    db = str(tmp_path / "s.sqlite")
    study = StudyConfig.from_dict(
        {
            "name": "lr",
            "model": {"d_model": 16, "n_heads": 2, "max_len": 16},
            "train": {"steps": 20, "log_every": 5, "seq_len": 16, "batch_size": 2},
            "axes": {
                "wrap": ["post", "pre"],
                "n_layers": [2, 8],
                "lr": [1e-4, 1e-3, 1e-2, 1e-1, 1.0],
                "seed": [0, 1],
            },
        }
    )
    fill_store(db, study, task=lr_task)
    index = write_report(db, str(tmp_path / "report"))
    html = open(index, encoding="utf-8").read()
    assert 'src="lr_curves.png"' in html
    for heading in ("Learning-rate sensitivity", "Best learning rate against depth", "Recommendation"):
        assert heading in html, heading
    result, console = render_in_chromium(browser, _instrumented_copy(index), str(tmp_path / "profile"))
    assert result == {"images": html.count("<img "), "broken": [], "errors": []} and console == []
