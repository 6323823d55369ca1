"""The modules of src/rollcall import one another without a circle (every import counts, even lazy ones)."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "rollcall"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it (top level, functions, TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from rollcall import procs`` imports the module rollcall.procs
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {name: imports(path, modules) - {name} for name, path in files.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_lazy_and_type_checking_imports():
    edges = graph()
    assert "rollcall.page.history" in edges["rollcall.cli"]  # imported inside a function
    assert "rollcall.live.view" in edges["rollcall.suite"]  # imported under TYPE_CHECKING


def test_src_rollcall_has_no_import_circle():
    found = cycle(graph())
    assert found is None, "import circle: " + " -> ".join(found or [])


#: The backends' wings: each a module or a package under rollcall.backends.
WINGS = ("rollcall.backends.local", "rollcall.backends.kubernetes", "rollcall.backends.slurm")

#: The layers of the package, bottom first: a module imports only from its own layer or those below it.
#: Each entry is a module or a package (all its modules, but those an entry of their own names): a new module
#: of ``checks`` or ``evidence`` takes its package's layer with no edit here. The wings sit above the neutral
#: contract and below everything that judges and reports a run; the checks over what every check shares
#: (``checks.runview``) and whose each problem is (``checks.blame``). A package's ``__main__`` is a program
#: that nothing imports: it sits on top.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(m if m == "rollcall" else f"rollcall.{m}" for m in layer.split())
    for layer in (
        "rollcall ranges ranklog procs jobspec secrets",  # rollcall: the package itself (``from rollcall import procs``)
        "collect evidence",
        "page isolation live",
        "backends",
        "options",
        "torchrun verdict page.timeline",
        "checks",
        "WINGS",
        "judge",
        "runner gate isolation.probe",
        "reports nodeverdicts page.history page.report page.trend metrics",
        "suite",
        "cli plugin e2e hookspecs",
    )
)


def wing_of(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def layer_of(module: str) -> int:
    """``module``'s layer: its wing's, a program's (the top), else its most specific entry's in LAYERS."""
    if wing_of(module):
        return next(i for i, layer in enumerate(LAYERS) if "rollcall.WINGS" in layer)
    if module.endswith(".__main__"):
        return len(LAYERS) - 1
    found = [
        (len(entry), i)
        for i, layer in enumerate(LAYERS)
        for entry in layer
        if module == entry or (entry != "rollcall" and module.startswith(entry + "."))
    ]
    assert found, f"{module} is in no layer of LAYERS: place it, or its package, there"
    return max(found)[1]


def test_a_module_takes_its_packages_layer_unless_named_itself():
    assert layer_of("rollcall.evidence.a_new_module") == layer_of("rollcall.evidence")
    assert layer_of("rollcall.checks.a_new_check") == layer_of("rollcall.checks.runview")
    assert layer_of("rollcall.isolation.probe") > layer_of("rollcall.judge") > layer_of("rollcall.isolation")
    assert layer_of("rollcall.checks.__main__") == len(LAYERS) - 1
    assert layer_of("rollcall") == 0 < layer_of("rollcall.suite")


def test_no_wing_imports_another_and_the_contract_imports_none():
    edges = graph()
    for module, imported in sorted(edges.items()):
        mine = wing_of(module)
        if mine is None:
            continue
        others = sorted(m for m in imported if wing_of(m) not in (None, mine))
        assert not others, f"{module} (wing {mine}) imports another wing: {others}"
    assert edges["rollcall.backends"] & {m for m in edges if wing_of(m)} == set()


def wing_paths(path: Path) -> set[str]:
    """The wings' modules ``path`` names as data (``"rollcall.backends.local:LocalBackend"``), not in its prose."""
    pattern = re.compile(r"rollcall\.backends\.(local|kubernetes|slurm)[\w.]*(:\w+)?")
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and pattern.fullmatch(node.value)
    }


def test_only_the_registry_names_a_wing_and_the_session_chooses_through_it():
    """No module outside the wings imports one; only the registry (``rollcall.backends.WINGS``) names each,
    by module path, loaded on first use: the session asks the registry for a wing, and for a capability."""
    from rollcall.backends import WINGS as REGISTRY

    edges = graph()
    choosers = {m for m, imported in edges.items() if not wing_of(m) and any(map(wing_of, imported))}
    assert choosers == set()
    outside = [p for p in PACKAGE.rglob("*.py") if not wing_of(module_name(p))]
    naming = {module_name(p): found for p in outside if (found := wing_paths(p))}
    assert set(naming) == {"rollcall.backends"}, naming
    assert {wing_of(w.backend.partition(":")[0]) for w in REGISTRY} == set(WINGS)
    for wing in REGISTRY:
        assert wing.load().__name__ == wing.backend.partition(":")[2]


def test_no_module_outside_the_wings_tests_a_backends_name_or_type():
    for name in ("suite.py", "plugin.py", "cli.py"):
        text = (PACKAGE / name).read_text()
        found = re.findall(
            r"backend_name\s*(?:==|!=|not in|in)|[\"'](?:kubernetes|slurm|local)[\"']|"
            r"(?:Kubernetes|Slurm|Local)Backend\b",
            text,
        )
        assert found == [], f"{name} tests a backend's name or type: {found}"


def test_no_import_runs_from_a_lower_layer_up():
    edges = graph()
    up = [
        f"{m} (layer {layer_of(m)}) imports {i} (layer {layer_of(i)})"
        for m, imported in sorted(edges.items())
        for i in sorted(imported)
        if layer_of(i) > layer_of(m)
    ]
    assert up == []


def test_the_package_root_holds_at_most_16_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 16, root
    assert {p.name for p in (PACKAGE / "backends").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "kubernetes",
        "slurm",
    }


def test_each_module_of_the_suite_holds_one_thing_in_at_most_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}, f"split these by what they hold: {long}"


WORKLOAD = PACKAGE.parent / "rollcall_workload"


def workload_graph() -> dict[str, set[str]]:
    files = {
        ".".join(p.relative_to(WORKLOAD.parent).with_suffix("").parts): p for p in WORKLOAD.rglob("*.py")
    }
    modules = set(files) | {"rollcall_workload"}
    return {name: imports(path, modules) - {name} for name, path in files.items()}


def test_the_workload_imports_nothing_of_the_suite():
    """The workload runs in images that hold only it: no module of rollcall_workload imports rollcall."""
    for path in WORKLOAD.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n == "rollcall" or n.startswith("rollcall.") for n in names), (
                f"{path.name} imports the suite: {names}"
            )


def test_the_workload_has_no_import_circle():
    edges = workload_graph()
    assert "rollcall_workload.rank.cli" in edges["rollcall_workload.rank.run"]
    found = cycle(edges)
    assert found is None, "import circle: " + " -> ".join(found or [])


def test_each_module_of_the_workload_holds_one_thing_in_at_most_600_lines():
    long = {p.name: n for p in WORKLOAD.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}, f"split these by what they hold: {long}"
