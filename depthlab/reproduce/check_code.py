"""The code that computes and decides each check, reduced to a hash per function.

A registration pins values (thresholds, regimes); it must also pin what a check does with them: changing
``at_least=e["far"]`` to ``e["far"] / 4``, or ``>`` to ``>=``, changes a result as surely as changing the
threshold. Each function is hashed on its normalised syntax tree (``ast.dump`` without line numbers and
without its docstring, names included), so reformatting and comments change nothing and any change to
what the code computes, or to the names it reads, changes the hash.

A claim's pinned functions are its registered reproduction function and every module-level function of
its module that it reaches by name (transitively), except the plotting ones (they draw, they decide
nothing), plus the module-level constants those functions read (other than the registration itself,
whose values are pinned as values), plus the code outside the module that decides its checks, named by
the module's ``DECIDED_ELSEWHERE`` ("module:Qualified.name", e.g. a formula of the study package). The
shared decision code (the interval, the result rules, the run readers every training claim uses) is
pinned once, under :data:`SHARED`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import sys

# The shared code that turns measurements into results: module -> the functions pinned.
SHARED = {
    "depthlab.intervals": ("mean_interval", "decide", "t_cdf", "t_quantile", "_betainc", "_betacf"),
    "depthlab.reproduce.reproduction": (
        "seeded_check",
        "unanimous_check",
        "unless_control",
        "combined",
        "counts",
    ),
    "depthlab.reproduce.lm_runs": (
        "final_loss",
        "below_unigram",
        "relative_to_unigram",
        "outcomes",
        "paired_outcomes",
        "_summarise",
        "all_trained",
    ),
    "depthlab.reproduce.shares": ("share_interval", "share_p_value", "share_check", "_at_least", "_solve"),
}
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
                if isinstance(t, ast.Name):
                    constants[t.id] = node
    return functions, constants


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def module_pins(source: str, root: str) -> dict[str, str]:
    """{name: digest} for the function ``root`` of module ``source`` and everything it reaches.

    Reached: module-level functions named in a reached function's body (plotting ones excepted), and
    the module-level constants they read (the registration and the names in :data:`SKIPPED` excepted).
    """
    functions, constants = _top_level(ast.parse(source))
    if root not in functions:
        raise KeyError(f"{root} is not a function of the module")
    seen, todo, pins = set(), [root], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = functions[name]
        pins[name] = digest(node)
        for ref in sorted(_names(node)):
            if ref in functions and "plot" not in ref and ref not in seen:
                todo.append(ref)
            elif ref in constants and ref not in SKIPPED:
                pins[ref] = digest(constants[ref])
    return dict(sorted(pins.items()))


def claim_pins(fn) -> dict[str, str]:
    """The pins of a registered reproduction function ``fn`` (see :func:`module_pins`), with those of
    the code its module names in ``DECIDED_ELSEWHERE`` under "module.Qualified.name"."""
    module = sys.modules[fn.__module__]
    pins = module_pins(inspect.getsource(module), fn.__name__)
    for ref in getattr(module, "DECIDED_ELSEWHERE", ()):
        mod_name, qualname = ref.split(":")
        source = inspect.getsource(importlib.import_module(mod_name))
        pins[f"{mod_name}.{qualname}"] = digest(qualified_node(ast.parse(source), qualname))
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


def shared_pins() -> dict[str, str]:
    """{"module.function": digest} for the shared decision code of :data:`SHARED`."""
    out = {}
    for mod_name, names in SHARED.items():
        functions, _ = _top_level(ast.parse(inspect.getsource(sys.modules[mod_name])))
        for name in names:
            out[f"{mod_name}.{name}"] = digest(functions[name])
    return out
