"""``depthlab reproduce all``: run every registered reproduction and write docs/reproductions.md.

A document generator, not a claim: it is not in the reproductions' registry.

The document holds, per reproduction, its source, its registration (expectation and regime with the
date they were fixed), what it checks, the counted checks and the sanity checks apart, any measured
tables and its plots (copied to ``img/`` beside the document), then every revision of every
registration, with the command, the machine, the date and the time taken. Beside it,
docs/reproductions-record.json records every run and check (:mod:`depthlab_lab.reproduce.run_record`), from
which every result over seeds can be decided again without rerunning. Each training run goes through
the run cache (:mod:`depthlab_lab.reproduce.run_cache`): a killed run of every claim resumes where it stopped,
and the document says how many runs were loaded rather than trained. Each claim on the scale ladder
shows its effect sizes against width from the ladder's store. Every measured number in it
comes from the run; the expectations are the registrations, the results are computed. A reproduction
that raises is recorded as a failed check with its error, and the others still run. ``--scale large``
runs the claims that have a large scale and writes docs/reproductions-large.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import glob
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field

import torch

from depthlab.errors import ConfigError, InputError
from depthlab.progress import TimeLeft, duration
from depthlab_lab.docgen.ladder_doc import DEFAULT_DB as LADDER_DB
from depthlab_lab.docgen.reproductions_ladder import check_ladder_db, ladder_view
from depthlab_lab.docgen.reproductions_origin import parts_context, rendered_machine
from depthlab_lab.docgen.reproductions_text import render
from depthlab_lab.reproduce import Check, Reproduction, load_all, parts, run_cache, run_record
from depthlab_lab.reproduce.reproduction import REGISTRATIONS, counts, format_counts, run_claim, supports
from depthlab_lab.reproduce.topology_record import OWN_PAGE

# The order of the document: the seeds' numbers first, then the papers' claims; any other registered
# reproduction follows in alphabetical order.
ORDER = (
    "seeds",
    "init-scaling",
    "stream-growth",
    "stream-trained",
    "batchnorm",
    "batchnorm-same",
    "no-norm",
    "no-residual",
    "recipe",
    "original-shape",
    "original-peak",
    "warmup",
    "shallow-post",
    "post-depth",
    "post-diverge",
    "post-fails",
    "depth",
    "model-update",
    "model-update-stream",
    "jacobian",
    "collapse",
    "skip-ablation",
    "final-norm",
    "redundancy",
    "dyt",
)
MARKER = "<!-- written by `depthlab reproduce all`: regenerate it rather than editing it -->"
DEFAULT_DOC = os.path.join("docs", "reproductions.md")
LARGE_DOC = os.path.join("docs", "reproductions-large.md")
RAISED = "the reproduction runs"  # the check that stands for a reproduction that raised


def doc_of(doc: str | None, scale: str) -> str:
    """The page ``reproduce all`` writes: ``doc``, else the default page of ``scale``."""
    return (DEFAULT_DOC if scale == "small" else LARGE_DOC) if doc is None else doc  # --doc '' is refused


def parts_of(folder: str | None, doc: str | None, scale: str) -> str:
    """The parts folder: ``folder``, else beside the page (docs/reproductions-parts for the default one)."""
    return folder if folder is not None else parts.default_folder(doc_of(doc, scale))


@dataclass
class Collection(Reproduction):
    """Several reproductions run together; ``format`` prints each one's table."""

    parts: list[Reproduction] = field(default_factory=list)

    def format(self) -> str:
        tables = [p.format() for p in self.parts]
        tables.append(f"all: {format_counts(self.checks)}; document: {self.data.get('doc')}")
        return "\n\n".join(tables)


def names_to_run(registry: dict, names: list[str] | None = None, scale: str = "small") -> list[str]:
    """The reproductions to run, in document order (``names`` restricts them; unknown names refused).
    At a scale other than small, only the claims registered at that scale. The claims with a page of
    their own (the residual topologies': docs/reproductions-topologies.md) only when named."""
    known = [n for n in registry if n not in OWN_PAGE]
    if names:
        known = list(registry)
        for n in names:
            if n not in known:
                raise ConfigError("name", n, f"one of {', '.join(sorted(known))}")
        known = names
    known = [n for n in known if n not in registry or supports(n, scale)]
    return [n for n in ORDER if n in known] + sorted(n for n in known if n not in ORDER)


def check_doc_path(doc: str) -> None:
    """Refuse to overwrite a file that this command did not write (its first line is not MARKER)."""
    if os.path.isdir(doc):
        raise InputError(f"{doc} is a directory; --doc takes a Markdown file path")
    if os.path.exists(doc) and not os.path.isfile(doc):
        raise InputError(f"{doc} is not a regular file; --doc takes a Markdown file path")
    if os.path.exists(doc):
        with open(doc, encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
        if first != MARKER:
            raise InputError(
                f"{doc} exists and was not written by `depthlab reproduce all`; move it or pass --doc"
            )


def run_one(name: str, quick: bool, out_dir: str | None, scale: str = "small") -> tuple[Reproduction, float]:
    """Run one reproduction; an exception becomes a failed check carrying the error. Returns (it, seconds)."""
    start = time.perf_counter()
    try:
        # whatever a reproduction prints while it runs is progress: keep stdout for the tables (or JSON)
        with contextlib.redirect_stdout(sys.stderr):
            result = run_claim(name, quick, os.path.join(out_dir, name) if out_dir else None, scale)
    except (InputError, ConfigError):
        raise
    except Exception as e:  # noqa: BLE001 -- recorded in the document, the other reproductions still run
        check = Check(RAISED, "completes", f"error: {type(e).__name__}: {e}", False)
        result = Reproduction(name, {"error": f"{type(e).__name__}: {e}"}, [check])
    return result, time.perf_counter() - start


def run_all(
    quick: bool = False,
    out_dir: str | None = None,
    doc: str | None = None,
    names: list[str] | None = None,
    scale: str = "small",
    ladder_db: str = LADDER_DB,
    parts_dir: str | None = None,
    plan: bool = False,
) -> Reproduction:
    """Every reproduction, one after the other; writes docs/reproductions.md (or, at ``scale`` large,
    docs/reproductions-large.md) and its plots. A claim whose committed part in ``parts_dir`` (default
    beside the page: :func:`parts_of`) has today's key is loaded from it, not run; a claim run here
    writes its part as it finishes (:mod:`depthlab_lab.reproduce.parts`), so the page accumulates across
    sittings. Training runs go through the run cache in use (:func:`depthlab_lab.reproduce.run_cache.use`);
    each claim on the scale ladder shows its table from ``ladder_db``. With ``plan`` (``depthlab reproduce
    all``), what will run and its expected time are said first (:func:`announce_all`), and the time left
    after each claim."""
    doc = doc_of(doc, scale)
    folder = parts_of(parts_dir, doc, scale)
    check_doc_path(doc)
    check_ladder_db(ladder_db)
    parts.check_writable(folder)
    registry = load_all()
    todo = names_to_run(registry, names, scale)
    keys = {name: parts.key_inputs(name, scale, quick) for name in todo}  # the code this sitting found
    context = {**machine(), "commit": run_cache.current_commit()}
    run_cache.reset_tally()
    start = time.perf_counter()
    results, seconds, loaded, kept = [], {}, {}, []
    clock = announce_all(todo, folder, keys, scale, quick) if plan else None
    for i, name in enumerate(todo, 1):
        step = f"[{i}/{len(todo)}] {name}"
        part, why = parts.status(folder, name, keys[name])
        if part is not None:
            result, seconds[name], loaded[name] = part.reproduction, part.seconds, part
            _log(
                f"{step}: loaded from its committed part, computed at commit {parts.short_commit(part.commit)}"
            )
        else:
            if why != "no part":  # one line; the file stays until a new part replaces it
                _log(f"{step}: its part {parts.path_of(folder, name)} is {why}; running it again")
            result, seconds[name], written = run_and_keep(
                step, name, quick, out_dir, scale, folder, keys, context
            )
            kept += [name] if written else []
            if clock is not None and name in clock.expected:
                clock.finished(name, seconds[name])
            if clock is not None and i < len(todo):
                _log(f"{step}: done; about {duration(clock.left_s())} left for the rest")
        results.append(result)
    context["seconds"] = round(time.perf_counter() - start, 1)
    context["cache"] = {"folder": run_cache.folder(), **vars(run_cache.TALLY)}
    computed = [n for n in todo if n not in loaded]
    context["parts"] = parts_context(folder, doc, loaded, kept, computed, context["commit"])
    context["scale"] = scale
    context["command"] = "depthlab reproduce all" + (" --quick" if quick else "")
    context["command"] += f" --scale {scale}" if scale != "small" else ""
    return write_page(results, registry, seconds, context, doc, todo, ladder_db, quick)


def announce_all(todo: list[str], folder: str, keys: dict, scale: str, quick: bool) -> TimeLeft:
    """Say (stderr) what ``reproduce all`` will do and how long it expects: the claims loaded from a
    current part, those to run, their training runs not yet in the run cache and the cost model's time
    for them (:func:`depthlab_lab.reproduce.dry_run.claim_plan`: each claim started with its training
    stopped); returns the clock of the claims to run (those that train nothing are not timed)."""
    from depthlab_lab.reproduce.dry_run import claim_plan  # the planner starts claims: loaded when planning

    current = [n for n in todo if parts.status(folder, n, keys[n])[0] is not None]
    plans = [claim_plan(n, scale, quick, run_cache.folder()) for n in todo if n not in current]
    left = {k: v for p in plans for k, v in p.left.items()}
    timed = {p.name: p.seconds for p in plans if p.seconds > 0}
    clock = TimeLeft(timed)
    _log(
        f"reproduce all: {len(todo)} claims, {len(current)} loaded from their current parts, {len(plans)} to run "
        f"({len(left)} training runs not in the run cache, {sum(p.runs > 0 for p in plans)} claims train); "
        f"expected about {duration(sum(left.values()))} of training (cost model: step times measured now; "
        "claims that train nothing not timed)"
    )
    return clock


def render_all(
    doc: str | None = None, scale: str = "small", ladder_db: str = LADDER_DB, parts_dir: str | None = None
) -> Reproduction:
    """docs/reproductions.md (or ``doc``) and its run record from the committed parts alone, whatever
    their keys: no claim runs. A part computed under code that has changed since is shown as computed,
    its section naming the commit and the modules that changed (it was not rerun). InputError, before
    anything is written, when a claim has no readable part."""
    doc = doc_of(doc, scale)
    folder = parts_of(parts_dir, doc, scale)
    check_doc_path(doc)
    check_ladder_db(ladder_db)
    registry = load_all()
    todo = names_to_run(registry, None, scale)
    loaded, changed, missing = {}, {}, []
    for name in todo:
        part, why = parts.load_any(folder, name, parts.key_inputs(name, scale, False))
        if part is None:
            missing.append(f"{name} ({why})")
            continue
        loaded[name], changed[name] = part, why
    if missing:
        raise InputError(
            f"--render: no part to render in {folder} for {', '.join(missing)}; run those claims first"
        )
    context = {**machine(), "commit": run_cache.current_commit(), "seconds": 0.0, "cache": None}
    context["parts"] = parts_context(folder, doc, loaded, [], [], context["commit"], changed)
    context["rendered"] = rendered_machine(loaded)
    context["scale"] = scale
    context["command"] = "depthlab reproduce all --render" + (f" --scale {scale}" if scale != "small" else "")
    results = [loaded[n].reproduction for n in todo]
    seconds = {n: loaded[n].seconds for n in todo}
    for name in todo:
        state = f"computed at commit {parts.short_commit(loaded[name].commit)}"
        _log(
            f"{name}: {state}"
            + (f"; not rerun although {changed[name]} changed since" if changed[name] else "")
        )
    return write_page(results, registry, seconds, context, doc, todo, ladder_db, False)


def write_page(
    results: list[Reproduction],
    registry: dict,
    seconds: dict,
    context: dict,
    doc: str,
    todo: list[str],
    ladder_db: str,
    quick: bool,
) -> Reproduction:
    """Write the page ``doc`` of ``results`` (its plots beside it, the ladder's tables from
    ``ladder_db``) and its run record; returns them collected."""
    scale = context["scale"]
    img = "img" if scale == "small" else f"img-{scale}"
    images = copy_plots(results, os.path.join(os.path.dirname(doc) or ".", img), img)
    blocks, answers = ladder_view(ladder_db, todo, doc)
    text = render(results, registry, seconds, images, context, quick, blocks, answers)
    os.makedirs(os.path.dirname(doc) or ".", exist_ok=True)
    with open(doc, "w", encoding="utf-8") as f:
        f.write(MARKER + "\n" + text)
    record_path = record_path_of(doc)
    run_record.write(run_record.build(results, REGISTRATIONS), record_path)
    return collect(results, seconds, {**context, "doc": doc, "record": record_path})


def run_and_keep(
    step: str, name: str, quick: bool, out_dir: str | None, scale: str, folder: str, keys: dict, sitting: dict
) -> tuple[Reproduction, float, bool]:
    """Run claim ``name`` and write its part to ``folder`` (with the run cache's tally for it): (its
    result, seconds, whether its part was written). A claim that raised writes none: the next sitting
    runs it again; a part that cannot be written is said in one line, and the page still shows the claim."""
    _log(f"{step} ...")
    before = dict(vars(run_cache.TALLY))
    result, seconds = run_one(name, quick, out_dir, scale)
    _log(f"{step}: {format_counts(result.checks)}, {seconds:.0f} s")
    if "error" in result.data and [c.claim for c in result.checks] == [RAISED]:
        _log(f"{step}: it raised, so no part is written; the next sitting runs it again")
        return result, seconds, False
    if parts.registered_kept(folder, name, quick):
        _log(f"{step}: its part holds the registered regime's result; a --quick one does not replace it")
        return result, seconds, False
    tally = {k: v - before[k] for k, v in vars(run_cache.TALLY).items()} if run_cache.folder() else None
    try:
        path = parts.write(folder, result, seconds, keys[name], tally, sitting)
    except (OSError, InputError) as e:
        _log(f"{step}: its part could not be written ({e}); the page still shows it")
        return result, seconds, False
    _log(f"{step}: kept in {path}")
    return result, seconds, True


def record_path_of(doc: str) -> str:
    """The run record beside ``doc``: docs/reproductions.md -> docs/reproductions-record.json."""
    return os.path.splitext(doc)[0] + "-record.json"


def collect(parts: list[Reproduction], seconds: dict, context: dict) -> Collection:
    """Every part's checks under one Reproduction, with the run's context and each part's counts."""
    checks = [dataclasses.replace(c, claim=f"{p.name}: {c.claim}") for p in parts for c in p.checks]
    each = {
        p.name: {**p.to_dict(), "ok": p.ok, "counts": counts(p.checks), "seconds": round(seconds[p.name], 1)}
        for p in parts
    }
    data = {**context, "counts": counts(checks), "reproductions": each}
    return Collection("all", data, checks, plots=[], source="every registered reproduction", parts=parts)


def copy_plots(parts: list[Reproduction], img_dir: str, rel: str = "img") -> dict[str, list[str]]:
    """Copy each reproduction's plots to img_dir as NAME-FILE.png; {name: [paths relative to the doc]}
    (``rel``: img_dir's name beside the document). A reproduction's older plots there are removed first,
    so that the folder holds only what this run drew."""
    out = {}
    for p in parts:
        out[p.name] = []
        for stale in glob.glob(os.path.join(glob.escape(img_dir), f"{glob.escape(p.name)}-*.png")):
            os.remove(stale)
        for src in p.plots:
            if not os.path.isfile(src):
                continue
            os.makedirs(img_dir, exist_ok=True)
            base = f"{p.name}-{os.path.basename(src)}"
            shutil.copyfile(src, os.path.join(img_dir, base))
            out[p.name].append(f"{rel}/{base}")
    return out


def machine() -> dict:
    """Where and when: host, CPU, cores, load, torch and Python versions, threads, UTC date."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_at_start": None if load is None else round(load, 2),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
