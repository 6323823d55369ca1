"""No function of ``src/`` is over 100 lines, the workload's Triton kernels aside (beside the modules' 600-line
cap in ``test_imports.py``): a longer one is split by what each part does."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: The most lines a function of ``src/`` may take, from its ``def`` to its last line; the workload's Triton
#: kernels (``rollcall_workload/kernels/``), whose bodies are one kernel each, are not held to it.
FUNCTION_LINES = 100


def long_functions(root: Path, cap: int = FUNCTION_LINES) -> dict[str, int]:
    """Each function (or method) under ``root`` longer than ``cap`` lines, as ``path:name``, with its length."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "kernels" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > cap:
                    found[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return found


def body(lines: int, indent: str = "    ") -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))


def test_the_finder_measures_from_def_to_the_last_line_methods_too_and_skips_the_kernels(tmp_path):
    (tmp_path / "pkg" / "kernels").mkdir(parents=True)
    (tmp_path / "pkg" / "long.py").write_text(
        "class C:\n    @property\n    def m(self):\n" + body(100, " " * 8)
    )
    (tmp_path / "pkg" / "fits.py").write_text("def f():\n" + body(99))
    (tmp_path / "pkg" / "kernels" / "k.py").write_text("def kernel():\n" + body(200))
    assert long_functions(tmp_path) == {"pkg/long.py:m": 101}


def test_no_function_of_src_holds_more_than_100_lines_outside_the_kernels():
    long = long_functions(SRC)
    assert long == {}, f"split these by what each part does: {long}"
