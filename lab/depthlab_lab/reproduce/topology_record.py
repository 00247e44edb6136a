"""The residual-topology claims' runs, resumable across sittings, and their run record.

The three claims (hc-gain, topology-stream, value-residual) take about two and a half hours of one core
together, more than a sitting; their results go on their own page,
docs/reproductions-topologies.md, not into ``depthlab reproduce all``. Here their runs are trained one
at a time (one torch thread), claim after claim, each claim's seeds in turn (every setting of seed 0,
then of seed 1, ...), and each finished run is reduced at once to the row its claim decides on (the
claim's ``row``) and appended to the run record, docs/reproductions-topologies-runs.json, one row a line.
A run already in the record is never trained again: the record is how the runs resume, in this checkout
or a fresh one. Runs also go through a run cache (:mod:`depthlab_lab.reproduce.run_cache`), so that a
run killed between training and recording is loaded, not trained again, and so that
``depthlab reproduce NAME --cache DIR`` loads what was trained here.

Each row carries, beside the claim's numbers, the run's config key, its training seconds, when it
started and finished (Unix seconds), the commit it trained at, torch's version and threads: the page
shows how many runs are done, what they cost, and that none started before the registration's commit.

    python -m depthlab_lab.reproduce.topology_record plan      # runs done, left, and the time left
    python -m depthlab_lab.reproduce.topology_record run       # train (or resume) them, record each
    python -m depthlab_lab.reproduce.topology_record render    # the page from the record alone
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import torch

from depthlab.errors import InputError
from depthlab.model import build_model
from depthlab.paths import check_output_file, replace_file
from depthlab_lab import REPOSITORY
from depthlab_lab.cli import one_line
from depthlab_lab.reproduce import REGISTRATIONS, run_cache
from depthlab_lab.reproduce.claims import hc_gain, topology_stream, value_residual
from depthlab_lab.reproduce.lm_runs import configs
from depthlab_lab.reproduce.topology_runs import label, train_one
from depthlab_lab.restore import check_restore_path

CLAIMS = {"hc-gain": hc_gain, "topology-stream": topology_stream, "value-residual": value_residual}
# Claims whose results are on their own page: `depthlab reproduce all` leaves them out unless named.
OWN_PAGE = frozenset(CLAIMS)
RECORD = os.path.join("docs", "reproductions-topologies-runs.json")
PAGE = os.path.join("docs", "reproductions-topologies.md")
CACHE = os.path.join("runs", "reproduce", "topologies-cache")
META = ("key", "seconds", "started_at", "finished_at", "commit", "torch", "threads", "loaded")
# The loop's work beyond the bare training step (telemetry on logged steps, the topology records):
# measured on this machine at 1.17x to 1.3x of the bare step for pre-LN, mHC and block AttnRes.
ALLOWANCE = 1.25


@dataclass(frozen=True)
class Planned:
    """One run of a claim: its setting, seed and config key."""

    claim: str
    design: str
    depth: int
    width: int
    seed: int
    model: dict
    train: dict
    key: str

    @property
    def label(self) -> str:
        return label(self.design, self.depth, self.width, self.seed)


def run_key(model: dict, train: dict) -> str:
    """The config key of a run of the small regime with these overrides (model hash - train hash)."""
    mcfg, tcfg = configs(model, train)
    return f"{mcfg.config_hash()}-{tcfg.config_hash()}"


def planned(name: str, regime: dict | None = None) -> list[Planned]:
    """Every run of claim ``name`` under its registered small regime (or ``regime``), seed by seed."""
    module = CLAIMS[name]
    r = regime or REGISTRATIONS[name].regime("small")
    out = []
    for s in r["seeds"]:
        for design, depth, width, model, train in module.settings(r):
            t = {**train, "seed": s}
            out.append(Planned(name, design, depth, width, s, model, t, run_key(model, t)))
    return out


def read_record(path: str) -> dict:
    """The record at ``path`` ({"claims": {name: [row]}}); an empty one when there is no file."""
    if not os.path.isfile(path):
        return {"claims": {}}
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a run record of the topology claims (not JSON: {e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("claims"), dict):
        raise InputError(f"{path}: not a run record of the topology claims (no 'claims' object)")
    return record


def record_text(record: dict) -> str:
    """The record as strict JSON, one row a line (a new run is one new line in a diff)."""
    claims = [
        f"  {json.dumps(name)}: [\n"
        + ",\n".join(f"   {json.dumps(r, allow_nan=False)}" for r in rows)
        + "\n  ]"
        for name, rows in record["claims"].items()
    ]
    return '{"claims": {\n' + ",\n".join(claims) + ("\n" if claims else "") + "}}\n"


def write_topology_record(path: str, record: dict) -> None:
    """Write ``record`` to ``path`` whole or not at all."""
    replace_file(path, record_text(record), "--record")


def done_keys(record: dict, name: str) -> set[str]:
    return {r["key"] for r in record["claims"].get(name, [])}


def measure(p: Planned, regime: dict | None = None) -> dict:
    """Train (or load from the run cache in use) the run ``p`` and return its row with its metadata."""
    r = regime or REGISTRATIONS[p.claim].regime("small")
    started = time.time()
    run, metrics, mcfg = train_one(p.label, p.model, p.train)
    row = CLAIMS[p.claim].row(run, metrics, mcfg, r)
    meta = {
        "key": p.key,
        "seconds": round(run.seconds, 2),
        "started_at": round(started, 1),
        "finished_at": round(time.time(), 1),
        "commit": run.commit,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "loaded": run.loaded,
    }
    return {**row, **meta}


def run_claims(
    names: list[str],
    record_path: str = RECORD,
    cache: str | None = CACHE,
    out=None,
    regimes: dict | None = None,
    after_claim=None,
) -> dict:
    """Train every run of ``names`` that ``record_path`` lacks, appending each row as it finishes; returns
    the record. ``regimes`` ({name: regime}) replaces the registered ones (tests only). ``after_claim(name)``
    is called once a claim's runs are all recorded."""
    out = out or sys.stdout
    record = read_record(record_path)
    with run_cache.using(cache):
        for name in names:
            todo = planned(name, (regimes or {}).get(name))
            have = done_keys(record, name)
            left = [p for p in todo if p.key not in have]
            print(
                f"{name}: {len(todo)} runs, {len(todo) - len(left)} recorded, {len(left)} to train",
                file=out,
                flush=True,
            )
            for i, p in enumerate(left, 1):
                row = measure(p, (regimes or {}).get(name))
                record["claims"].setdefault(name, []).append(row)
                write_topology_record(record_path, record)
                how = "loaded from the run cache" if row["loaded"] else "trained"
                print(
                    f"  {name} {i}/{len(left)}: {p.label:34} {row['outcome']:9} val {row['val_loss']} "
                    f"{row['seconds']:7.1f} s ({how})",
                    file=out,
                    flush=True,
                )
            if after_claim is not None and left:
                after_claim(name)
    return record


# ---- the plan: runs left and their expected time ----------------------------------------------------


def _step_time(design: str, width: int, depth: int, cache: dict) -> float:
    """Seconds of one bare training step (forward, backward, Adam) of ``design`` at ``width`` and
    ``depth``: a 2- and an 8-layer model timed here and now (the best of 3 repeats of 3 steps each, so
    that a busy moment of a shared machine does not set the plan), extrapolated linearly in the layers."""
    if (design, width) not in cache:
        times = [_best_step(design, width, layers) for layers in (2, 8)]
        per_layer = max((times[1] - times[0]) / 6, 0.0)
        cache[(design, width)] = (max(times[0] - 2 * per_layer, 0.0), per_layer)
    fixed, per_layer = cache[(design, width)]
    return fixed + per_layer * depth


def _best_step(design: str, width: int, layers: int, repeats: int = 3, steps: int = 3) -> float:
    mcfg, tcfg = configs({"wrap": design, "d_model": width, "n_layers": layers}, {})
    with torch.random.fork_rng(devices=[]):
        model = build_model(mcfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, mcfg.vocab_size, (tcfg.batch_size, tcfg.seq_len + 1))

    def step():
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - start) / steps)
    return best


def expected_seconds(p: Planned, cache: dict) -> float:
    """The expected seconds of run ``p``: its steps at :data:`ALLOWANCE` x the bare step, and its
    evaluations (a forward pass a third of a step, per evaluation batch)."""
    mcfg, tcfg = configs(p.model, p.train)
    step = _step_time(p.design, p.width, p.depth, cache)
    evals = tcfg.steps // tcfg.eval_every + 1
    return ALLOWANCE * step * tcfg.steps + evals * tcfg.eval_batches * step / 3


def plan(names: list[str], record_path: str = RECORD, out=None) -> float:
    """Print, per claim, its runs, how many are recorded, and the expected one-core time of the rest;
    returns the total expected seconds."""
    out = out or sys.stdout
    record, cache, total = read_record(record_path), {}, 0.0
    for name in names:
        todo = planned(name)
        have = done_keys(record, name)
        left = [p for p in todo if p.key not in have]
        seconds = sum(expected_seconds(p, cache) for p in left)
        total += seconds
        spent = sum(r["seconds"] for r in record["claims"].get(name, []))
        print(
            f"{name:16} {len(todo):4} runs, {len(todo) - len(left):4} recorded ({spent / 60:.0f} min of training), "
            f"{len(left):4} left: about {seconds / 60:.0f} min",
            file=out,
            flush=True,
        )
    print(
        f"{'all':16} about {total / 3600:.2f} h of one core left (step times measured now, x {ALLOWANCE} for "
        f"the loop's telemetry, one torch thread)",
        file=out,
        flush=True,
    )
    return total


# ---- committing the record as claims finish ----------------------------------------------------------


def render(record_path: str = RECORD, page: str = PAGE) -> None:
    """Write the page from the record (a fresh process: the renderer as it is in the checkout now)."""
    from depthlab_lab.docgen.reproductions_topologies import write_page

    write_page(record_path, page)


def commit_record(name: str, record_path: str = RECORD, page: str = PAGE, out=None, root=REPOSITORY) -> bool:
    """Render the page in a fresh process, then commit the record and the page alone (nothing else staged
    is taken) in the git work tree ``root``; True when committed. A failure (a held index lock, no git) is
    printed, never raised."""
    out = out or sys.stdout
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "lab")])}
    cmd = [
        sys.executable,
        "-m",
        "depthlab_lab.reproduce.topology_record",
        "render",
        "--record",
        record_path,
        "--doc",
        page,
    ]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode:
        print(f"render failed (the record is kept): {done.stderr.strip()[-500:]}", file=out, flush=True)
    record = read_record(record_path)
    n = sum(len(v) for v in record["claims"].values())
    total = sum(len(planned(c)) for c in CLAIMS)
    message = (
        f"Topology claims: run record after {name}'s runs ({n} of {total} runs recorded), and the page "
        "rendered from it (committed by topology_record run)"
    )
    for _ in range(5):
        git = subprocess.run(
            ["git", "add", "--", record_path, page], cwd=root, capture_output=True, text=True
        )
        if git.returncode == 0:  # a new file must be known to git before a commit --only takes it
            git = subprocess.run(
                ["git", "commit", "-q", "-m", message, "--only", "--", record_path, page],
                cwd=root,
                capture_output=True,
                text=True,
            )
        if git.returncode == 0:
            print(f"committed: {message}", file=out, flush=True)
            return True
        if "index.lock" not in git.stderr:
            break
        time.sleep(30)
    print(f"commit failed: {git.stderr.strip() or git.stdout.strip()}", file=out, flush=True)
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m depthlab_lab.reproduce.topology_record", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("what", choices=("plan", "run", "render"))
    p.add_argument("--claims", help=f"comma-separated (default all: {', '.join(CLAIMS)})")
    p.add_argument("--record", default=RECORD, help=f"the run record (default {RECORD})")
    p.add_argument("--doc", default=PAGE, help=f"the page (default {PAGE})")
    p.add_argument("--cache", default=CACHE, help=f"the run cache folder (default {CACHE})")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--commit", action="store_true", help="for run: commit the record and page after each claim"
    )
    args = p.parse_args(argv)
    names = [n.strip() for n in (args.claims or ",".join(CLAIMS)).split(",") if n.strip()]
    for n in names:
        if n not in CLAIMS:
            p.error(f"--claims: {n} is not one of {', '.join(CLAIMS)}")
    torch.set_num_threads(args.threads)
    return one_line(p.prog, lambda: _run(args, names))


def _run(args: argparse.Namespace, names: list[str]) -> int:
    # the page of a record: a record that is not there is refused, never rendered as an empty page
    if args.what == "render":
        check_restore_path(args.record, "--record")
        check_output_file(args.doc, "--doc", ("md",))
    if args.what == "plan":
        plan(names, args.record)
    elif args.what == "render":
        render(args.record, args.doc)
        print(f"wrote {args.doc} from {args.record}")
    else:
        after = (lambda name: commit_record(name, args.record, args.doc)) if args.commit else None
        run_claims(names, args.record, args.cache, regimes=None, after_claim=after)
        print("all runs recorded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
