"""docs/reproductions-topologies.md: the residual-topology claims' results, written from their run record
alone (docs/reproductions-topologies-runs.json, :mod:`depthlab_lab.reproduce.topology_record`).

Every number on the page is a recorded run's: the checks are the claims' own ``decide`` functions applied
to the recorded rows (the code ``depthlab reproduce NAME`` runs), once a claim's runs are all recorded;
before that the page shows what is recorded, cell by cell, and says how many runs of how many are done.
Nothing is typed: the registration (expectation, regime, notes with the estimated cost) is the claim's,
the commit and its time are git's.
"""

from __future__ import annotations

import datetime
import math
import os

from depthlab.errors import InputError
from depthlab.paths import replace_file
from depthlab_lab.reproduce import REGISTRATIONS, REPRODUCTIONS
from depthlab_lab.reproduce.claims import hc_gain, topology_stream, value_residual
from depthlab_lab.reproduce.ladder_run import commit_time
from depthlab_lab.reproduce.lm_runs import final_loss
from depthlab_lab.reproduce.reproduction import counts, format_counts
from depthlab_lab.reproduce.topology_record import CLAIMS, PAGE, RECORD, planned, read_record
from depthlab_lab.reproduce.topology_runs import as_run

TITLE = "# Residual topologies: the reproductions"
MARKER = (
    "<!-- written by `python -m depthlab_lab.reproduce.topology_record render` from "
    "docs/reproductions-topologies-runs.json: regenerate it rather than editing it -->"
)
RESUME = "python -m depthlab_lab.reproduce.topology_record run --commit"
RERENDER = "python -m depthlab_lab.reproduce.topology_record render"


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short(commit: str) -> str:
    return commit[:7] if commit else "(not yet committed)"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _geo(values) -> str:
    vs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not vs:
        return "-"
    return f"{math.exp(sum(math.log(v) for v in vs) / len(vs)):.3g}"


def _mean(values, fmt: str = ".3f") -> str:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return format(sum(vs) / len(vs), fmt) if vs else "-"


def _table(title: str, columns: list[str], rows: list[list]) -> list[str]:
    if not rows:
        return []
    out = [f"**{title}**", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_esc(c) for c in row) + " |" for row in rows]
    return out + [""]


def _cells(rows: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return out


# ---- each claim's measured tables, from whatever is recorded --------------------------------------------


def _hc_tables(rows: list[dict], r: dict) -> list[str]:
    body = []
    for design in r["designs"]:
        for width in r["widths"]:
            for depth in r["depths"]:
                runs = _cells(rows, "design", "width", "depth").get((design, width, depth), [])
                if not runs:
                    continue
                body.append(
                    [
                        design,
                        width,
                        depth,
                        len(runs),
                        _geo([x["gains"][0][1] for x in runs if x["gains"]]),
                        _geo([hc_gain.end_gain(x) for x in runs]),
                        _geo([x["gains"][-1][2] for x in runs if x["gains"]]),
                        _mean([hc_gain.step_slope(x) for x in runs]),
                        _mean([final_loss(as_run(x)) for x in runs]),
                        "/".join(x["outcome"] for x in runs),
                    ]
                )
    cols = ["design", "d_model", "layers", "runs", "gain at init", "gain after", "backward after",
            "log10 gain per 100 updates", "val loss", "outcomes"]  # fmt: skip
    return _table(
        f"The top layer's composite gain, at the first logged step and after {r['steps']} updates "
        "(geometric mean over the seeds recorded), its slope against the update, and the validation loss "
        "(mean)",
        cols,
        body,
    )


def _stream_tables(rows: list[dict], r: dict) -> list[str]:
    body = []
    for design in [r["baseline"], *r["designs"]]:
        for width in r["widths"]:
            for depth in r["depths"]:
                runs = _cells(rows, "design", "width", "depth").get((design, width, depth), [])
                if not runs:
                    continue
                body.append(
                    [
                        design,
                        width,
                        depth,
                        len(runs),
                        _geo([_ratio(x["rms_init"]) for x in runs]),
                        _geo([_ratio(x["rms"]) for x in runs]),
                        _mean([topology_stream.exponent_within(x, "rms_init") for x in runs], ".2f"),
                        _mean([topology_stream.exponent_within(x) for x in runs], ".2f"),
                        _mean([final_loss(as_run(x)) for x in runs]),
                        "/".join(x["outcome"] for x in runs),
                    ]
                )
    cols = ["design", "d_model", "layers", "runs", "rms(top)/rms(emb) at init", "after training",
            "exponent within, at init", "after training", "val loss", "outcomes"]  # fmt: skip
    out = _table(
        f"The stream's growth on a held-out batch, at init and after {r['steps']} updates (geometric mean "
        "over the seeds recorded; the exponent within a stack: log-log slope of rms(x_l)/rms(x_0) against l, "
        "mean)",
        cols,
        body,
    )
    across = []
    for design in [r["baseline"], *r["designs"]]:
        for width in r["widths"]:
            per_seed = {"rms_init": [], "rms": []}
            for s in r["seeds"]:
                runs = [
                    _cells(rows, "design", "width", "depth", "seed").get((design, width, d, s), [None])[0]
                    for d in r["depths"]
                ]
                if all(x is not None for x in runs):
                    for key, values in per_seed.items():
                        values.append(topology_stream.exponent_across(runs, key))
            if per_seed["rms"]:
                across.append(
                    [
                        design,
                        width,
                        len(per_seed["rms"]),
                        _mean(per_seed["rms_init"], ".2f"),
                        _mean(per_seed["rms"], ".2f"),
                    ]
                )
    out += _table(
        "The growth exponent across stacks (log-log slope of rms(top)/rms(embedding) against "
        f"{', '.join(map(str, r['depths']))} layers; mean over the seeds with every depth recorded)",
        ["design", "d_model", "seeds", "at init", "after training"],
        across,
    )
    return out


def _ratio(profile) -> float | None:
    if not profile or profile[0] is None or profile[-1] is None or profile[0] <= 0:
        return None
    return profile[-1] / profile[0]


def _vres_tables(rows: list[dict], r: dict) -> list[str]:
    body = []
    cell = _cells(rows, "design", "width", "depth")
    for depth, width in r["cells"]:
        base = cell.get((r["baseline"], width, depth), [])
        for design in [r["baseline"], *r["designs"]]:
            runs = cell.get((design, width, depth), [])
            if not runs:
                continue
            reach = []
            for x in runs:
                b = next((y for y in base if y["seed"] == x["seed"]), None)
                if b is not None:
                    target = final_loss(as_run(b))
                    reach.append(value_residual.reached(x["val"], target, r["steps"], r["eval_every"]))
            body.append(
                [
                    width,
                    depth,
                    design,
                    len(runs),
                    _mean([final_loss(as_run(x)) for x in runs]),
                    _mean(reach, ".0f"),
                    "/".join(x["outcome"] for x in runs),
                ]
            )
    return _table(
        f"Final validation loss after {r['steps']} updates and the updates to reach pre-LN's final loss "
        "(same seed; mean over the seeds recorded)",
        ["d_model", "layers", "design", "runs", "val loss", "updates to pre-LN's final loss", "outcomes"],
        body,
    )


TABLES = {"hc-gain": _hc_tables, "topology-stream": _stream_tables, "value-residual": _vres_tables}


# ---- the page -------------------------------------------------------------------------------------------


def claim_status(name: str, record: dict) -> dict:
    """Runs planned, recorded (of the plan), their training seconds, the first start and the last finish,
    and how many started before the registration's commit."""
    plan = {p.key for p in planned(name)}
    rows = [r for r in record["claims"].get(name, []) if r.get("key") in plan]
    registered = commit_time(REGISTRATIONS[name].commit)
    early = [r for r in rows if registered is not None and r.get("started_at", 0) < registered]
    return {
        "planned": len(plan),
        "rows": rows,
        "seconds": sum(r["seconds"] for r in rows),
        "first": min((r["started_at"] for r in rows), default=None),
        "last": max((r["finished_at"] for r in rows), default=None),
        "early": len(early),
        "registered": registered,
        "stray": len(record["claims"].get(name, [])) - len(rows),
    }


def decided(name: str, rows: list[dict]):
    """The checks of claim ``name`` from its rows (its module's ``decide`` on its registered regime)."""
    return CLAIMS[name].decide(rows, REGISTRATIONS[name].regime("small"))


def _value(v) -> str:
    return f"`{v}`" if not isinstance(v, str) else v


def page(record: dict) -> str:
    """The page's Markdown from ``record``."""
    status = {name: claim_status(name, record) for name in CLAIMS}
    done = sum(len(s["rows"]) for s in status.values())
    total = sum(s["planned"] for s in status.values())
    seconds = sum(s["seconds"] for s in status.values())
    lines = [
        TITLE,
        "",
        MARKER,
        "",
        "Three claims of the papers on residual topologies ([topologies.md](topologies.md)), each registered "
        "in a commit before any of its runs, with seeds, intervals and the shared decision rule of the other "
        "claims ([reproductions.md](reproductions.md)): a mean over seeds with a 95% Student t-interval, "
        "agree when the whole interval is on the expected side of the registered threshold, MISMATCH when "
        "all of it is on the other side, inconclusive when it straddles it. A check marked sanity holds by "
        "construction or is measured without training: shown, not counted.",
        "",
        "The scale is said in every check: byte-level decoders of d_model 32 to 128 and 6 to 48 layers, a "
        "few hundred updates of 16 windows of 32 bytes, on one CPU core; the papers train models of "
        "hundreds of millions to billions of parameters for billions of tokens. A result here is a result "
        "at this scale only.",
        "",
        f"Runs recorded: **{done} of {total}** ({_duration(seconds)} of training so far: each run's wall "
        "time on one torch thread, on a shared machine where a run gets part of a core); every "
        "run is one line of the run record, `docs/reproductions-topologies-runs.json`, from which this page "
        f"is written (`{RERENDER}`). `{RESUME}` trains the runs the record lacks, one at a time on one torch "
        "thread, and commits the record and this page as each claim's runs finish.",
        "",
        "| claim | source | registered | runs recorded | training (wall) | agree | MISMATCH | inconclusive | sanity |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    results = {}
    for name, s in status.items():
        source = _source(name)
        if s["rows"] and len(s["rows"]) == s["planned"]:
            results[name] = decided(name, s["rows"])
            n = counts(results[name])
            tally = [n["agree"], n["MISMATCH"], n["inconclusive"], n["sanity"]]
        else:
            tally = ["pending"] * 4
        lines.append(
            f"| [{name}](#{name}) | {_esc(source)} | {_short(REGISTRATIONS[name].commit)} | "
            f"{len(s['rows'])} of {s['planned']} | {_duration(s['seconds'])} | "
            + " | ".join(str(t) for t in tally)
            + " |"
        )
    lines.append("")
    for name, s in status.items():
        lines += _section(name, s, results.get(name), record)
    return "\n".join(lines).rstrip() + "\n"


def _source(name: str) -> str:
    return {
        "hc-gain": "Xie et al. 2025 (mHC); Zhu et al. 2024 (Hyper-Connections)",
        "topology-stream": "Kimi Team 2026 (Attention Residuals); Pagliardini et al. 2024 (DenseFormer)",
        "value-residual": "Zhou et al. 2024 (ResFormer)",
    }[name]


def _section(name: str, s: dict, checks, record: dict) -> list[str]:
    reg, module = REGISTRATIONS[name], CLAIMS[name]
    fn = REPRODUCTIONS[name]
    doc = (module.__doc__ or "").strip()
    first = " ".join(doc.split("\n\n")[0].split())
    lines = [f"## {name}", "", f"**The claim:** {(fn.__doc__ or '').strip().splitlines()[0]}", ""]
    if checks is not None:
        lines += [f"**Result:** {format_counts(checks)}.", ""]
    else:
        lines += [
            f"**Result:** pending: {len(s['rows'])} of {s['planned']} runs recorded; the checks are decided once "
            "every run is recorded (the tables below show what is).",
            "",
        ]
    lines += [f"Source: {first}", ""]
    registered = s["registered"]
    when = f" ({_when(registered)})" if registered is not None else ""
    lines += [f"**Registered** in commit {_short(reg.commit)}{when}, before any of its runs.", ""]
    lines.append("- expectation: " + "; ".join(f"`{k}` = {_value(v)}" for k, v in reg.expectation.items()))
    lines.append("- regime (small): " + "; ".join(f"`{k}` = `{v}`" for k, v in reg.regime("small").items()))
    lines.append(f"- how the regime was chosen, what was known, and its estimated cost: {reg.notes}")
    for rev in reg.revisions:
        lines.append(
            f"- revision {rev.date}: `{rev.key}` {rev.old!r} -> {rev.new!r}: {rev.reason} (results known: "
            f"{rev.results_known})"
        )
    lines.append("")
    rest = doc.split("\n\n", 1)[1] if "\n\n" in doc else ""
    if rest:
        lines += ["<details><summary>What is measured, and how</summary>", "", rest, "", "</details>", ""]
    runs = f"Runs: {len(s['rows'])} of {s['planned']} recorded, {_duration(s['seconds'])} of training (wall time)"
    if s["rows"]:
        runs += f", from {_when(s['first'])} to {_when(s['last'])}"
        if registered is not None:
            runs += f"; {s['early']} of them started before the registration's commit"
    if s["stray"]:
        runs += f"; {s['stray']} recorded rows are no run of the registered regime (not read)"
    lines += [runs + ".", ""]
    if checks is not None:
        lines += ["| claim | expected | measured | result |", "|---|---|---|---|"]
        for c in checks:
            result = c.result + (f" (sanity: {c.sanity})" if c.sanity else "")
            lines.append(f"| {_esc(c.claim)} | {_esc(c.stated)} | {_esc(c.measured)} | {_esc(result)} |")
        lines.append("")
        if any(c.result != "agree" for c in checks if c.counted):
            lines += [f"At a larger scale: {module.AT_SCALE}", ""]
    lines += TABLES[name](s["rows"], reg.regime("small"))
    return lines


def write_page(record_path: str = RECORD, doc: str = PAGE) -> str:
    """Write the page ``doc`` from the record at ``record_path``; returns its path. A file there that this
    generator did not write (no title and marker) is not replaced."""
    if os.path.isfile(doc):
        with open(doc, encoding="utf-8") as f:
            head = f.read(len(TITLE) + len(MARKER) + 4)
        if not head.startswith(TITLE) or MARKER not in head:
            raise InputError(
                f"{doc}: exists and was not written from the topology claims' record; not replaced"
            )
    replace_file(doc, page(read_record(record_path)), "--doc")
    return doc
