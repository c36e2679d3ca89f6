"""The guard prompt template as data: extraction from the pinned upstream
module with ``ast`` (never imported or executed) and its checks
(docs/PROTOCOL.md, "The guard prompt").

Input: a Python source file, the variable holding the template and the
template's pinned sha256. Output: a verified ``GuardTemplate`` (the template
text and its sha256; defined here, the lowest stage that makes one, and
re-exported by ``guards.base`` for the adapters).

Invariants: the template is the string literal of the variable's last
module-level binding (anything that would need evaluation is refused); its
sha256 (UTF-8) equals the pin; its format fields are exactly
``{user_request}``, ``{agent_action}`` and ``{env_info}``.
"""

from __future__ import annotations

import ast
import hashlib
import string
from dataclasses import dataclass
from pathlib import Path

from guardrepro.errors import PromptError


@dataclass(frozen=True)
class GuardTemplate:
    """A guard's prompt template: its text and the sha256 of its UTF-8 bytes."""

    text: str
    sha256: str


PLACEHOLDERS = frozenset({"user_request", "agent_action", "env_info"})

def check_placeholders(text: str, *, source: str) -> None:
    """Refuse a template whose format fields are not exactly the three TS-Guard ones."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise PromptError(f"{source}: template is not a valid format string: {exc}") from exc
    if fields != PLACEHOLDERS:
        raise PromptError(
            f"{source}: template placeholders are {sorted(fields)}, expected {sorted(PLACEHOLDERS)}"
        )


def _string_value(node: ast.expr) -> str | None:
    """The value of a string-literal expression (implicit concatenation and
    parentheses are folded by the parser; ``+`` of literals is folded here);
    None for anything that would need evaluation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string_value(node.left), _string_value(node.right)
        if left is not None and right is not None:
            return left + right
    return None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _binds(stmt: ast.stmt, variable: str) -> bool:
    """Whether executing module-level ``stmt`` may (re)bind or delete
    ``variable`` in the module namespace (nested scopes are not entered,
    except for the names they define)."""
    if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
        return False  # a bare annotation binds nothing
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == variable:
                return True
            continue
        if isinstance(node, _SCOPES):
            continue
        if (isinstance(node, ast.Name) and node.id == variable
                and isinstance(node.ctx, ast.Store | ast.Del)):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == variable:
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _direct_value(stmt: ast.stmt, variable: str) -> ast.expr | None:
    """The expression ``stmt`` binds to ``variable`` directly (``x = ...``,
    ``a = x = ...``, ``x: T = ...``); None for any other kind of binding
    (unpacking, ``+=``, a conditional or loop body, import, def, del)."""
    if isinstance(stmt, ast.Assign):
        if any(isinstance(t, ast.Name) and t.id == variable for t in stmt.targets):
            return stmt.value
        return None
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.value if stmt.target.id == variable else None
    return None


def extract_template(py_path: str | Path, variable: str, expected_sha256: str) -> GuardTemplate:
    """Read the string assigned to module-level ``variable`` in ``py_path``
    with ``ast`` (the file is never imported or executed) and check its sha256.

    As when Python runs the module, the last module-level statement that
    binds the name decides its value; earlier assignments are ignored. That
    statement must assign a plain string literal: implicit concatenation,
    parentheses and ``+`` of literals are accepted; f-strings, calls, names,
    bytes, unpacking, ``+=``, and a binding inside a conditional, loop,
    ``try`` or ``with`` block, an import, ``def`` or ``del`` are refused.
    """
    path = Path(py_path)
    try:
        source = path.read_bytes().decode("utf-8")
    except FileNotFoundError as exc:
        raise PromptError(f"{path}: prompt module not found") from exc
    except UnicodeDecodeError as exc:
        raise PromptError(f"{path}: prompt module is not UTF-8: {exc}") from exc
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise PromptError(f"{path}: cannot parse the prompt module: {exc}") from exc
    found = [stmt for stmt in tree.body if _binds(stmt, variable)]
    if not found:
        raise PromptError(f"{path}: no module-level assignment to {variable!r}")
    stmt = found[-1]
    value_node = _direct_value(stmt, variable)
    text = _string_value(value_node) if value_node is not None else None
    if text is None:
        what = type(value_node).__name__ if value_node is not None else type(stmt).__name__
        raise PromptError(
            f"{path}:{stmt.lineno}: {variable!r} is not assigned a plain string literal "
            f"({what}) by its last module-level binding; refusing to evaluate code"
        )
    observed = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if observed != expected_sha256.lower():
        raise PromptError(
            f"{path}:{stmt.lineno}: template {variable!r} sha256 mismatch: "
            f"expected {expected_sha256}, observed {observed}"
        )
    check_placeholders(text, source=f"{path}:{variable}")
    return GuardTemplate(text=text, sha256=observed)
