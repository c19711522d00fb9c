"""The code's shape (STYLE.md): a module over 400 lines, or a function over 60, says why.

The reason goes in the docstring, in a sentence holding "Over 400 lines" (the module's) or
"Over 60 lines" (the function's), so that a reader meets it where the length starts and a
search finds every one. A function's length runs from its `def` to its last line, its
decorators not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import openclaw_rl

PACKAGE = Path(openclaw_rl.__file__).parent
MODULE_LINES, FUNCTION_LINES = 400, 60
MODULE_PHRASE, FUNCTION_PHRASE = f"Over {MODULE_LINES} lines", f"Over {FUNCTION_LINES} lines"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _long_modules_without_reason() -> list[str]:
    found = []
    for path in _modules():
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MODULE_LINES and MODULE_PHRASE not in (ast.get_docstring(ast.parse(text)) or ""):
            found.append(f"{_name(path)}: {lines} lines")
    return found


def _long_functions_without_reason() -> list[str]:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > FUNCTION_LINES and FUNCTION_PHRASE not in (ast.get_docstring(node) or ""):
                found.append(f"{_name(path)}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_every_module_over_400_lines_says_why() -> None:
    missing = _long_modules_without_reason()
    assert not missing, (
        f"{len(missing)} modules are over {MODULE_LINES} lines without a reason: " + "; ".join(missing)
        + f". Split the module, or say why it is one in its docstring: ({MODULE_PHRASE}: ...)"
    )


def test_every_function_over_60_lines_says_why() -> None:
    missing = _long_functions_without_reason()
    assert not missing, (
        f"{len(missing)} functions are over {FUNCTION_LINES} lines without a reason: " + "; ".join(missing)
        + f". Split the function, or say why it is one in its docstring: ({FUNCTION_PHRASE}: ...)"
    )


def test_the_checks_count_from_def_and_read_the_reason(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)

    def body(n: int) -> str:
        return "\n".join(f"    x{i} = {i}" for i in range(n))

    (package / "long.py").write_text(
        f'"""A module."""\n\n\ndef bare():\n{body(FUNCTION_LINES)}\n\n\n'  # def + 60: 61 lines
        f'def told():\n    """({FUNCTION_PHRASE}: one table.)"""\n{body(FUNCTION_LINES)}\n\n\n'
        f"@staticmethod\ndef decorated():\n{body(FUNCTION_LINES - 1)}\n"  # 60 lines from its def
    )
    table = "\n".join(f"y{i} = {i}" for i in range(MODULE_LINES))
    (package / "big.py").write_text(f'"""A module."""\n{table}\n')
    (package / "told.py").write_text(f'"""A module. ({MODULE_PHRASE}: one table.)"""\n{table}\n')

    assert _long_functions_without_reason() == [f"pkg/long.py:4 bare: {FUNCTION_LINES + 1} lines"]
    assert _long_modules_without_reason() == [f"pkg/big.py: {MODULE_LINES + 1} lines"]
