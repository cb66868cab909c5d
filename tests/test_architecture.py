"""The layering of docs/architecture.md, checked on the source: no upward import, no cycle, one key owner."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "autotune"

#: docs/architecture.md's packages, lowest first: data flows config -> engines -> stats/decisions -> store -> study
#: -> report/observers -> cli. A module may import its own package and the ones before it.
LAYERS = [
    {"autotune", "autotune.core"},
    {"autotune.config"},
    {"autotune.machine"},
    {"autotune.engines"},
    {"autotune.stats"},
    {"autotune.decisions"},
    {"autotune.store"},
    {"autotune.study"},
    {"autotune.report"},
    {"autotune.observers"},
    {"autotune.bench"},
    {"autotune.cli", "autotune.__main__"},
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if any(module == m or (m != "autotune" and module.startswith(m + ".")) for m in layer):
            return i
    raise AssertionError(f"{module} is in no layer of docs/architecture.md: add it to the table and to LAYERS")


def _imports(path: Path) -> set[str]:
    """Every autotune module ``path`` imports, at any depth (functions and TYPE_CHECKING blocks included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "autotune"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "autotune":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


#: The shape of a stored key (messages such as "autotune: error: ..." are not keys).
STORED_KEY = re.compile(r"autotune:[a-z_]+")
GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers() -> None:
    upward = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
              for a, targets in GRAPH.items() for b in targets if _layer(b) > _layer(a)]
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_only_the_ledger_touches_optuna_user_attributes_or_names_a_stored_key() -> None:
    offenders = []
    for name, path in MODULES.items():
        if name == "autotune.store.ledger":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("user_attrs", "set_user_attr",
                                                                 "set_trial_user_attr", "set_study_user_attr"):
                offenders.append(f"{name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and STORED_KEY.fullmatch(node.value):
                offenders.append(f"{name}:{node.lineno} {node.value!r}")
    assert offenders == []


def test_the_checker_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    # study used to import report inside run_study; tracking imports report lazily: both must be visible.
    assert "autotune.report" in GRAPH["autotune.observers.mlflow"]
    assert "autotune.store.ledger" in GRAPH["autotune.study._loop"]
