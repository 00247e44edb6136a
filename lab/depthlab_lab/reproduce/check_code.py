"""The code that computes and decides each check, reduced to a hash per function.

A registration pins values (thresholds, regimes); it must also pin what a check does with them: changing
``at_least=e["far"]`` to ``e["far"] / 4``, or ``>`` to ``>=``, changes a result as surely as changing the
threshold. Each function is hashed on its normalised syntax tree (``ast.dump`` without line numbers and
without its docstring, names included), so reformatting and comments change nothing and any change to
what the code computes, or to the names it reads, changes the hash.

A claim's pinned functions are its registered reproduction function and every module-level function of
its module that it reaches by name (transitively), except the plotting ones (they draw, they decide
nothing), plus the module-level constants those functions read (other than the registration itself,
whose values are pinned as values). The pins follow what the claim imports from other depthlab_lab.reproduce
modules (another claim's training config, a setup's walk, a notebook's cell), transitively, keyed
"MODULE.NAME"; not into the modules pinned once under :data:`SHARED` (the interval, the result rules, the
run readers every training claim uses, the thresholds that label a run), nor into those that only draw
or estimate times. Code outside depthlab_lab.reproduce that decides a claim's checks (a formula of the study
package) is named by the module's ``DECIDED_ELSEWHERE`` ("module:Qualified.name").

A pin added later for code that has not changed since the registration is not a revision: its first
digest is the registered code's (lab/tests/test_reproduce_registration.py checks it against the registration
commit for the claims registered since code was pinned). A change to pinned code is one.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import sys

from depthlab_lab.reproduce.moved import actual_name, registered_name

# The shared code that turns measurements into results: module -> the functions ("Class.method" for a
# method) and module constants pinned. A name added here later pins the code as it is at the commit that
# adds it: a new pin of code that has not changed is not a revision (its first digest is today's);
# a change to it from then on is one.
SHARED = {
    "depthlab.intervals": (
        "mean_interval",
        "decide",
        "t_cdf",
        "t_quantile",
        "_betainc",
        "_betacf",
        "log_interval",
        "p_value",
        "holm",
    ),
    "depthlab.reproduce.reproduction": (
        "seeded_check",
        "unanimous_check",
        "unless_control",
        "combined",
        "counts",
        "with_revision",
        "revised_unless_control",
        "family_results",
        "resolve",
        "sanity_under_revision",
        "log_revised",
        "effect_revised",
        "LOG_SCALE",
        "Check.under",
        "Check.counted",
        "Check.counted_under",
        "Check.__post_init__",
    ),
    "depthlab.reproduce.lm_runs": (
        "final_loss",
        "below_unigram",
        "relative_to_unigram",
        "outcomes",
        "paired_outcomes",
        "_summarise",
        "all_trained",
        "capped_loss",
        "loss_gap_check",
        "CAP_REVISION",
        "base",
        "eval_loss",
        "configs",
        "train_seeds",
        "STALL_SHARE",
        "BOTH_TRAINED",
        "NO_ATTN_SKIP",
        "TINY_MODEL",
        "TINY_TRAIN",
        "LARGE_MODEL",
        "LARGE_TRAIN",
    ),
    "depthlab.reproduce.shares": ("share_interval", "share_p_value", "share_check", "_at_least", "_solve"),
    # The regimes the training claims start from, and the thresholds that label a run (trained,
    # undertrained, stalled, diverged): a change there relabels runs, so it changes results.
    "depthlab.train.regimes": ("TINY_LM_MODEL", "TINY_LM_TRAIN", "LARGE_LM_MODEL", "LARGE_LM_TRAIN"),
    "depthlab.watch.outcome": (
        # the code that applies them, not only the constants: every run's label rests on it
        "Monitor.stall_level",
        "Monitor.update",
        "Monitor.log",
        "Monitor.decide",
        "Monitor._fitted_drop",
        "escape_step",
        "EMA_WEIGHT",
        "SPIKE_FLOOR",
        "BLOWUP",
        "BLOWUP_LOGS",
        "STREAM_BLOWUP",
        "STALL_MARGIN",
        "FALL_MARGIN",
        "OUTCOMES",
    ),
}
# A claim's pins follow the code it imports from these modules (its own helpers, another claim's, a
# setup's), transitively; not into the modules pinned once under SHARED, nor into those that only draw,
# estimate times or hold the registration (pinned as values).
# (Module names as imported today; the pins' keys are the names registered: depthlab_lab.reproduce.moved.)
FOLLOWED = "depthlab_lab.reproduce"
NOT_FOLLOWED = (
    "depthlab_lab.reproduce.reproduction",
    "depthlab_lab.reproduce.registration",
    "depthlab_lab.reproduce.lm_runs",
    "depthlab_lab.reproduce.shares",
    "depthlab_lab.reproduce.claim_plots",
    "depthlab_lab.reproduce.cost",
    "depthlab_lab.reproduce.run_cache",  # how a run is stored and loaded, not what a check reads or decides
    "depthlab_lab.reproduce.moved",
)
# Packages whose ``from P import M`` imports a module (followed through ``M.name``).
PACKAGES = ("depthlab_lab.reproduce", "depthlab_lab.reproduce.claims")
# Names that are never pinned: the registration (pinned as values) and what only draws or reports.
SKIPPED = ("REGISTRATION", "AT_SCALE", "QUICK")


def _normalised(node: ast.AST) -> str:
    """``node``'s syntax tree as text, without its docstring or positions."""
    node = _without_docstring(node)
    return ast.dump(node, annotate_fields=True, include_attributes=False)


def _without_docstring(node: ast.AST) -> ast.AST:
    body = getattr(node, "body", None)
    if (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(getattr(body[0], "value", None), ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        node = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "body": body[1:] or [ast.Pass()]})
    return node


def digest(node: ast.AST) -> str:
    """The first 16 hex digits of the SHA-256 of ``node``'s normalised syntax tree."""
    return hashlib.sha256(_normalised(node).encode()).hexdigest()[:16]


def _top_level(tree: ast.Module) -> tuple[dict[str, ast.AST], dict[str, ast.AST]]:
    """(functions, constants) defined at the top of a module, by name."""
    functions, constants = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in t.elts if isinstance(t, ast.Tuple) else [t]:  # BATCH, SEQ = 8, 32
                    if isinstance(n, ast.Name):
                        constants[n.id] = node
    return functions, constants


def _classes(tree: ast.Module) -> dict[str, ast.AST]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _imports(tree: ast.Module) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(names, modules) a module imports from the followed depthlab_lab.reproduce modules: {local name:
    (module, name)} for ``from M import name`` and {local name: module} for ``from P import M``."""
    names, modules = {}, {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        module = actual_name(node.module or "")  # code from before the move imports the old names
        if not module.startswith(FOLLOWED):
            continue
        for alias in node.names:
            local, full = alias.asname or alias.name, f"{module}.{alias.name}"
            if module in PACKAGES:
                if _followed(full):
                    modules[local] = full
            elif _followed(module):
                names[local] = (module, alias.name)
    return names, modules


def _followed(module: str) -> bool:
    return module.startswith(FOLLOWED) and module not in NOT_FOLLOWED


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _attributes(node: ast.AST, modules: dict[str, str]) -> set[tuple[str, str]]:
    """(module, name) for each ``M.name`` in ``node`` where M is an imported module of ``modules``."""
    return {
        (modules[n.value.id], n.attr)
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules
    }


def module_pins(source: str, root: str) -> dict[str, str]:
    """{name: digest} for the function ``root`` of module ``source`` and everything it reaches in the
    module (the imports are not followed: see :func:`reached_pins`).

    Reached: module-level functions named in a reached function's body (plotting ones excepted), and
    the module-level constants they read (the registration and the names in :data:`SKIPPED` excepted).
    """
    return reached_pins("__main__", root, lambda m: source, follow=False)


def reached_pins(module: str, root: str, source_of, follow: bool = True) -> dict[str, str]:
    """{name: digest} for the function ``root`` of ``module`` and everything it reaches, the code it
    imports from other depthlab_lab.reproduce modules included (``follow``), transitively.

    ``source_of(module name)`` gives a module's source (today's, or a past commit's). Names of
    ``module`` are pinned as they are named there; an imported one as "MODULE.NAME".
    """
    trees: dict[str, tuple] = {}

    def parsed(mod: str) -> tuple:
        if mod not in trees:
            tree = ast.parse(source_of(mod))
            trees[mod] = (*_top_level(tree), _classes(tree), *_imports(tree))
        return trees[mod]

    if root not in parsed(module)[0]:
        raise KeyError(f"{root} is not a function of the module")
    seen, todo, pins = set(), [(module, root)], {}
    while todo:
        mod, name = todo.pop()
        if (mod, name) in seen:
            continue
        seen.add((mod, name))
        functions, constants, classes, names, modules = parsed(mod)
        key = name if mod == module else f"{registered_name(mod)}.{name}"
        if name not in functions:  # an imported constant or class: pinned, not followed
            node = constants.get(name) or classes.get(name)
            if node is None:
                raise KeyError(f"{mod} defines no {name}")
            pins[key] = digest(node)
            continue
        pins[key] = digest(functions[name])
        refs = sorted(_names(functions[name]))
        for ref in refs:
            if ref in functions and "plot" not in ref:
                todo.append((mod, ref))
            elif ref in constants and ref not in SKIPPED:
                ckey = ref if mod == module else f"{registered_name(mod)}.{ref}"
                pins[ckey] = digest(constants[ref])
            elif follow and ref in names and "plot" not in ref:
                todo.append(names[ref])
        if follow:
            todo += [(m, a) for m, a in sorted(_attributes(functions[name], modules)) if "plot" not in a]
    return dict(sorted(pins.items()))


def source_of(module: str) -> str:
    """Today's source of ``module`` (imported; its name as registered or as today)."""
    return inspect.getsource(importlib.import_module(actual_name(module)))


def claim_pins(fn, sources=source_of) -> dict[str, str]:
    """The pins of a registered reproduction function ``fn`` (see :func:`reached_pins`), with those of
    the code its module names in ``DECIDED_ELSEWHERE`` under "module.Qualified.name". ``sources``:
    the modules' sources (by default today's)."""
    module = sys.modules[fn.__module__]
    pins = reached_pins(fn.__module__, fn.__name__, sources)
    for ref in getattr(module, "DECIDED_ELSEWHERE", ()):
        mod_name, qualname = ref.split(":")
        pins[f"{mod_name}.{qualname}"] = digest(qualified_node(ast.parse(sources(mod_name)), qualname))
    return dict(sorted(pins.items()))


def qualified_node(tree: ast.Module, qualname: str) -> ast.AST:
    """The function or class ``qualname`` ("f", "Class.method") defined in ``tree`` (KeyError if none)."""
    node: ast.AST = tree
    for part in qualname.split("."):
        found = [
            n
            for n in getattr(node, "body", [])
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
        ]
        if not found:
            raise KeyError(f"{qualname} is not defined in the module")
        node = found[0]
    return node


def shared_pins(sources=None) -> dict[str, str]:
    """{"module.name": digest} for the shared decision code and constants of :data:`SHARED`
    (``sources``: the modules' sources, by default today's)."""
    sources = sources or source_of
    out = {}
    for mod_name, names in SHARED.items():
        tree = ast.parse(sources(actual_name(mod_name)))
        _, constants = _top_level(tree)
        for name in names:
            node = constants[name] if name in constants else qualified_node(tree, name)
            out[f"{mod_name}.{name}"] = digest(node)
    return out
