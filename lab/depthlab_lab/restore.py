"""A study store rebuilt from a committed run record: every recorded run's outcome and losses, and the
telemetry the record kept of it.

A grid of hours is kept in the repository as a compact run record (``docs/doctor-runs.json``,
``docs/reproductions-ladder-runs.json``: per study, each run's config hash, outcome, losses, escape step
and, where it was kept, its training time, when it started and finished, and some of its telemetry),
not as a store. :func:`restore` writes such a record back into a store, so that what reads a store
(``depthlab reproduce doctor``, ``depthlab reproduce ladder``) re-derives its numbers from the record
without training anything, and a study resumed on that store trains only what the record lacks. Each
study is added exactly as ``depthlab study`` adds it, from its grid file or from a StudyConfig built in
code; a recorded run is written as done only where the store does not already hold it done (a stored
run is never replaced). The whole record is checked before anything is written: a record run whose
config hash the study does not produce (the grid or the config hashing changed since the record was
written, and the run could not be told apart from another), a config hash given twice, a row whose own
fields (wrap, d_model, n_layers, lr, warmup, steps, seed; a ladder row's setting) disagree with the
config its hash names, a value of the wrong type (text or a boolean where a number is kept, a step
beyond SQLite's integers), an unknown outcome or malformed telemetry is refused with the store
untouched. Each run is written in one transaction (its result, probe, telemetry and times together):
a restore stopped part way (an error, a kill) leaves every run either done and whole or not written,
and a run a restore of an earlier version left without its telemetry or times is completed by the next.

What a restored run reads back (``depthlab.report.load(db, study).runs``): the record's result fields
as the runs columns, the start and finish times the record gives (none where it kept none: the
registration checks read when a study's runs started, never when they were restored), and, where a
row carries them, its "metrics" (logged steps as the store's metrics table holds them: ``{"step": 1,
"loss": ...}``) and "layers" (telemetry rows ``{"step", "layer", "update_ratio", ...}``), each read back
as the original store returned it for the steps, streams and columns kept (the others None). With
``probe`` (the doctor's), each run's at-init probe is taken again with the current code, as the study
worker takes it (deterministic: the run's seed and first batch), so that ``depthlab calibrate`` can
refit on it.
"""

from __future__ import annotations

import json
import math
import os

from depthlab.errors import InputError
from depthlab.paths import check_input_file, printable
from depthlab.study.grid import StudyConfig
from depthlab.study.schema import LAYER_COLUMNS, METRIC_COLUMNS
from depthlab.study.store import Store
from depthlab.study.worker import probe_at_init
from depthlab.watch.outcome import OUTCOMES
from depthlab_lab import lab_file

HOST = "restored from a run record"  # the host column of a restored run: where its numbers came from
RESULT_KEYS = ("outcome", "val_loss", "unigram_loss", "escape_step")
MORE_RESULT_KEYS = ("final_train_loss", "val_bpb", "accuracy")  # written where a row carries them
NOT_METRICS = ("run_id", "extra_json", "layers")  # a stored metrics row's keys that are not on_log keys
LOSSES = ("val_loss", "unigram_loss", *MORE_RESULT_KEYS)  # a number or null (a diverged run's may be nan)
TIMES = ("seconds", "started_at", "finished_at")  # a finite number >= 0 or null
# a row's own fields that name its configuration: (section of the run's config, field)
IDENTITY = {"wrap": "model", "d_model": "model", "n_layers": "model", "lr": "train", "warmup": "train",
            "steps": "train", "seed": "train"}  # fmt: skip
MAX_INT = 2**63 - 1  # SQLite's largest integer


def check_restore_path(path: str, flag: str = "--restore") -> None:
    """InputError (one line naming ``flag``) for a run record that is missing or is not a regular file
    (a FIFO or /dev/zero would block or never end: it is named for what it is)."""
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{flag}: an empty path names no run record")
    if not os.path.lexists(path):
        raise InputError(f"{flag} {printable(path)}: no such run record")
    check_input_file(path, flag)


def read_record(path: str) -> dict[str, list[dict]]:
    """{study name: [recorded run]} from a run record ({"studies": {...}}); InputError when it is not one."""
    check_input_file(path, "run record")  # a FIFO or a device is named, never read
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"run record {path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise InputError(f"run record {path}: not JSON (not UTF-8 text)") from None
    except RecursionError:
        raise InputError(f"run record {path}: not a run record (nested too deeply)") from None
    except ValueError as e:
        raise InputError(f"run record {path}: not JSON ({e})") from None
    studies = data.get("studies") if isinstance(data, dict) else None
    if not isinstance(studies, dict) or not all(
        isinstance(v, list) and all(isinstance(r, dict) for r in v) for v in studies.values()
    ):
        raise InputError(f'run record {path}: not a run record (no "studies" of run lists)')
    return studies


def check_studies(record: str, recorded, known: list[str], whose: str, other: str) -> None:
    """InputError when the record ``record`` holds none of the studies ``known`` (another command's
    record: ``other`` says which), or a study that is none of them; nothing is written."""
    names = list(recorded)
    if not names:
        raise InputError(f"--restore {record}: the record holds no study")
    if not set(names) & set(known):
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        raise InputError(
            f"--restore {record} holds none of {whose} studies (it holds {names[0]}{more}): {other}"
        )
    stray = [n for n in names if n not in known]
    if stray:
        raise InputError(
            f"--restore {record}: {stray[0]} is none of {whose} studies ({len(stray)} such "
            f"stud{'y' if len(stray) == 1 else 'ies'}); nothing was restored"
        )


def restore(
    record: str,
    db: str,
    studies: list[str | StudyConfig],
    probe: bool = True,
    settings: dict[str, dict] | None = None,
    recorded: dict[str, list[dict]] | None = None,
) -> dict[str, tuple[int, int]]:
    """Write the runs ``record`` keeps of each study in ``studies`` (grid files or StudyConfigs; one the
    record does not name is skipped) into the store at ``db``, their at-init probes taken again when
    ``probe``; returns {study: (runs restored or completed, runs already done)}. ``settings``: per study,
    {setting label: the "setting" axis value it names}, to check a row's "setting"; ``recorded``: as
    :func:`checked` takes it. Nothing is written when any of it is refused."""
    todo = checked(record, studies, settings, recorded)
    return {study.name: _write(db, study, specs, rows, probe) for study, specs, rows in todo}


def checked(
    record: str,
    studies: list[str | StudyConfig],
    settings: dict[str, dict] | None = None,
    recorded: dict[str, list[dict]] | None = None,
) -> list[tuple[StudyConfig, list, list[dict]]]:
    """(study, its runs, the record's rows of it) for each study the record names, every row checked
    against the study as it is built now; InputError, before anything is written, for a row it refuses.
    ``recorded``: the record's {study: rows} already read (a record kept in another shape), ``record``
    then only names it."""
    recorded = read_record(record) if recorded is None else recorded
    out = []
    for given in studies:
        study = StudyConfig.from_yaml(lab_file(given)) if isinstance(given, str) else given
        where = given if isinstance(given, str) else f"the study {study.name}"
        rows = recorded.get(study.name)
        if not rows:
            continue
        specs = study.expand()
        by_hash = {s.hash: s for s in specs}
        named = [r.get("config_hash") for r in rows]
        if not all(isinstance(h, str) for h in named):
            odd = next(h for h in named if not isinstance(h, str))
            raise InputError(
                f"run record {record}: a run of {study.name} has the config_hash {_shown(odd)}, not a hash"
            )
        stray = [h for h in named if h not in by_hash]
        if stray:
            raise InputError(
                f"run record {record}: {len(stray)} run(s) of {study.name} (first {stray[0]}) are not in "
                f"{where} as it stands: the grid or its config hashing changed since the record was written"
            )
        seen: set[str] = set()
        twice = [h for h in named if h in seen or seen.add(h)]
        if twice:
            raise InputError(
                f"run record {record}: run {twice[0]} of {study.name} is recorded {named.count(twice[0])} "
                f"times ({len(set(twice))} such run(s)): a record keeps each run once"
            )
        bad = [
            r.get("outcome")
            for r in rows
            if not isinstance(r.get("outcome"), str) or r["outcome"] not in OUTCOMES
        ]
        if bad:
            raise InputError(
                f"run record {record}: a run of {study.name} has the outcome {_shown(bad[0])}, not one of "
                f"{', '.join(OUTCOMES)}"
            )
        labels = (settings or {}).get(study.name)
        for row in rows:
            why = (
                _bad_values(row)
                or _bad_identity(row, by_hash[row["config_hash"]], labels)
                or _bad_telemetry(row)
            )
            if why:
                raise InputError(f"run record {record}: run {row['config_hash']} of {study.name}: {why}")
        out.append((study, specs, rows))
    return out


def _shown(v) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 40 else text[:36] + "..."


def _number(v) -> bool:
    """A JSON number SQLite can keep as a REAL (not a boolean, not text, not an int beyond a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return isinstance(v, float) or abs(v) < 1e308


def _whole(v) -> bool:
    """A whole number >= 0 that SQLite can keep as an INTEGER (not a boolean)."""
    return type(v) is int and 0 <= v <= MAX_INT


def _bad_values(row: dict) -> str | None:
    """Why a row's result fields cannot be written as the store keeps them (None when they can)."""
    for k in LOSSES:
        if row.get(k) is not None and not _number(row[k]):
            return f"{k} is {_shown(row[k])}, not a number"
    for k in TIMES:
        v = row.get(k)
        if v is not None and not (_number(v) and math.isfinite(v) and v >= 0):
            return f"{k} is {_shown(v)}, not a time in seconds"
    v = row.get("escape_step")
    if v is not None and not _whole(v):
        return f"escape_step is {_shown(v)}, not a step (a whole number from 0 to 2**63 - 1)"
    return None


def _same(given, want) -> bool:
    if isinstance(given, bool) or isinstance(want, bool):
        return type(given) is type(want) and given == want
    if isinstance(want, (int, float)) and isinstance(given, (int, float)):
        return math.isclose(given, want, rel_tol=1e-9, abs_tol=0.0)
    return given == want


def _bad_identity(row: dict, spec, labels: dict | None) -> str | None:
    """Why a row's own fields do not name the config its hash names (None when they agree or are absent):
    a record whose rows were edited or had their hashes swapped puts each result on another config."""
    config = spec.config_dict()
    for field, section in IDENTITY.items():
        if field in row and not _same(row[field], config[section].get(field)):
            return (
                f"its {field} is {_shown(row[field])} but its config_hash names a run with {field} "
                f"{_shown(config[section].get(field))}: the row was edited or its hash belongs to another run"
            )
    if labels is not None and "setting" in row:
        axis = labels.get(row["setting"]) if isinstance(row["setting"], str) else None
        if axis is None:
            return f"its setting {_shown(row['setting'])} is none of the study's settings"
        if spec.axes.get("setting") != axis:
            return (
                f"its setting is {row['setting']!r} but its config_hash names a run of another setting: "
                "the row was edited or its hash belongs to another run"
            )
    return None


def _bad_telemetry(row: dict) -> str | None:
    """Why a row's "metrics" or "layers" cannot be written back (None when they can, or are absent)."""
    for key, index in (("metrics", ("step",)), ("layers", ("step", "layer"))):
        items = row.get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            return f'"{key}" is not a list of rows'
        for x in items:
            if not all(type(x.get(k)) is int for k in index):
                return f'a "{key}" row has no whole-number {" and ".join(index)}'
            wrong = next((k for k in index if not _whole(x[k])), None)
            if wrong:
                return f'a "{key}" row has the {wrong} {x[wrong]}, beyond a stored step (0 to 2**63 - 1)'
            columns = METRIC_COLUMNS if key == "metrics" else LAYER_COLUMNS
            if not all(x.get(k) is None or _number(x[k]) for k in columns):
                return f'a "{key}" row of step {x["step"]} has a value that is not a number'
            extra = x.get("extra_json")
            if key == "metrics" and extra is not None and not _json_object(extra):
                return f'a "metrics" row of step {x["step"]} has an extra_json that is not a JSON object'
        steps = [tuple(x[k] for k in index) for x in items]
        if len(set(steps)) < len(steps):
            return f'"{key}" holds the same {" and ".join(index)} twice'
    return None


def _json_object(text) -> bool:
    try:
        return isinstance(text, str) and isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _metrics(row: dict) -> list[dict]:
    """The row's kept logged steps as on_log records (what Store.finish takes)."""
    out = []
    for m in row.get("metrics") or []:
        extra = json.loads(m["extra_json"]) if isinstance(m.get("extra_json"), str) else {}
        out.append({**extra, **{k: v for k, v in m.items() if k not in NOT_METRICS}})
    return out


def _complete(store: Store, run: dict, row: dict) -> bool:
    """Whether a stored run is whole: trained here, or restored with the times and telemetry its row
    gives. A restore of an earlier version wrote a run's result and its times in two transactions; one
    stopped between them left the run done at the time of restoring, without its telemetry."""
    if run["host"] != HOST:
        return True
    if run["finished_at"] != row.get("finished_at") or run["started_at"] != row.get("started_at"):
        return False
    return len(store.layer_metrics(run["id"])) >= len(row.get("layers") or []) and len(
        store.metrics(run["id"])
    ) >= len(row.get("metrics") or [])


def _write(db: str, study: StudyConfig, specs: list, rows: list[dict], probe: bool) -> tuple[int, int]:
    os.makedirs(os.path.dirname(os.path.abspath(db)), exist_ok=True)
    with Store(db) as store:
        sid = store.add_study(study.name, study.to_dict(), study.config_hash(specs), specs)
        stored = {r["config_hash"]: r for r in store.runs(sid)}
        by_hash = {s.hash: s for s in specs}
        restored = kept = 0
        for row in rows:
            run = stored[row["config_hash"]]
            if run["status"] == "done" and _complete(store, run, row):
                kept += 1
                continue
            result = {k: row.get(k) for k in RESULT_KEYS} | {k: row[k] for k in MORE_RESULT_KEYS if k in row}
            payload = {
                "result": result,
                "metrics": _metrics(row),
                "host": HOST,
                "seconds": row.get("seconds"),
            }
            if probe:
                payload["probe"], payload["probe_error"] = probe_at_init(by_hash[row["config_hash"]])
            recorded = {k: row.get(k) for k in ("started_at", "finished_at")} | {
                "layers": row.get("layers") or []
            }
            store.finish(run["id"], payload, recorded)  # one transaction: the run whole, or not written
            restored += 1
    return restored, kept
