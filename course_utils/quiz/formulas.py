"""Formulas in quiz files: safe arithmetic on parameters, and the placeholders that show a student's own numbers.

A formula is arithmetic on numbers and parameter names: + - * / **, unary minus, and the functions in
FORMULA_FUNCTIONS. It is read with `ast` and evaluated by walking the tree in floating point: nothing is compiled,
imported or executed, and every cost is bounded (length, node count, exponent size), so a hostile quiz file fails at
load time, at once.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache


class FormulaError(ValueError):
    """A formula outside the arithmetic quiz files may use, or one without a finite value at the given numbers."""


MAX_FORMULA_CHARS = 400
MAX_FORMULA_NODES = 200
MAX_EXPONENT = 1_000  # float powers cost nothing, but `9**9**9` must fail at once instead of overflowing late


def _power(base: float, exponent: float) -> float:
    if abs(exponent) > MAX_EXPONENT:
        raise FormulaError(f"the exponent {exponent:g} is larger than {MAX_EXPONENT}")
    try:
        value = base ** exponent
    except (OverflowError, ZeroDivisionError) as e:
        raise FormulaError(f"{base:g} ** {exponent:g} has no finite value") from e
    if isinstance(value, complex):
        raise FormulaError(f"{base:g} ** {exponent:g} is not a real number")
    return value


def _divide(a: float, b: float) -> float:
    if b == 0:
        raise FormulaError("division by zero")
    return a / b


def _sqrt(x: float) -> float:
    if x < 0:
        raise FormulaError(f"sqrt of the negative number {x:g}")
    return math.sqrt(x)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _divide, ast.Pow: _power}
# name: (function, fewest arguments, most arguments)
FORMULA_FUNCTIONS: dict[str, tuple[Callable[..., float], int, int]] = {
    "sqrt": (_sqrt, 1, 1), "abs": (abs, 1, 1), "min": (min, 1, 32), "max": (max, 1, 32),
    "mean": (lambda *xs: sum(xs) / len(xs), 1, 32), "round": (round, 2, 2)}


def _compile(node: ast.AST, names: frozenset[str]) -> Callable[[Mapping[str, float]], float]:
    """A function of the parameter values that evaluates the formula's tree; raises FormulaError for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        try:
            constant = float(node.value)
        except OverflowError:
            raise FormulaError(f"the number {str(node.value)[:20]}... is too large") from None
        return lambda env: constant
    if isinstance(node, ast.Name):
        if node.id not in names:
            known = ", ".join(sorted(names)) or "none"
            raise FormulaError(f"unknown name {node.id!r} (the parameters are {known}; functions: "
                               f"{', '.join(FORMULA_FUNCTIONS)})")
        name = node.id
        return lambda env: env[name]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _compile(node.operand, names)
        return (lambda env: -operand(env)) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        op, left, right = _BINARY[type(node.op)], _compile(node.left, names), _compile(node.right, names)
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORMULA_FUNCTIONS:
        function, fewest, most = FORMULA_FUNCTIONS[node.func.id]
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or not fewest <= len(node.args) <= most:
            raise FormulaError(f"{node.func.id}() takes {fewest} to {most} plain arguments")
        if node.func.id == "round":
            places = node.args[1]
            if not (isinstance(places, ast.Constant) and type(places.value) is int and 0 <= places.value <= 12):
                raise FormulaError("round(x, n) needs n to be a whole number from 0 to 12, written as a number")
            x, n = _compile(node.args[0], names), places.value
            return lambda env: round(x(env), n)
        args = [_compile(a, names) for a in node.args]
        return lambda env: function(*(a(env) for a in args))
    what = ast.unparse(node)[:40] if isinstance(node, ast.expr) else type(node).__name__
    raise FormulaError(f"{what!r} is not allowed: a formula is numbers, parameter names, + - * / **, and "
                       f"{', '.join(FORMULA_FUNCTIONS)}")


@lru_cache(maxsize=4096)
def compile_formula(text: str, names: frozenset[str]) -> Callable[[Mapping[str, float]], float]:
    """Check a formula over the parameter `names` and return a function of their values; raises FormulaError."""
    if not isinstance(text, str) or not text.strip():
        raise FormulaError("a formula must be a non-empty string")
    if len(text) > MAX_FORMULA_CHARS:
        raise FormulaError(f"a formula may be at most {MAX_FORMULA_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise FormulaError(f"{text.strip()[:60]!r} is not a formula ({type(e).__name__})") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_FORMULA_NODES:
        raise FormulaError(f"a formula may have at most {MAX_FORMULA_NODES} parts")
    return _compile(tree.body, names)


def evaluate(text: str, values: Mapping[str, float]) -> float:
    """The finite value of a formula at these parameter values; raises FormulaError otherwise."""
    try:
        value = compile_formula(text, frozenset(values))({k: float(v) for k, v in values.items()})
    except FormulaError:
        raise
    except (OverflowError, ValueError, TypeError) as e:
        raise FormulaError(f"{text[:60]!r} has no finite value here ({e})") from None
    if not math.isfinite(value):
        raise FormulaError(f"{text[:60]!r} has no finite value at {dict(values)}")
    return value


# `{name}` is a parameter's value (or `{answer}`, the key); `{=formula}` a computed one. Other braces are LaTeX.
_PLACEHOLDER = re.compile(r"\{(=[^{}\n]{1,400}|[A-Za-z_][A-Za-z0-9_]{0,40})\}")


def placeholders(text: str) -> tuple[list[str], list[str]]:
    """The `{name}` names and `{=formula}` formulas a text uses."""
    found = [m.group(1) for m in _PLACEHOLDER.finditer(text)]
    return [f for f in found if not f.startswith("=")], [f[1:] for f in found if f.startswith("=")]


def render(text: str, shown: Mapping[str, str], env: Mapping[str, float]) -> str:
    """Fill a text's placeholders: `{name}` from `shown` (left as written if not there), `{=formula}` evaluated."""
    def fill(m: re.Match) -> str:
        inside = m.group(1)
        if inside.startswith("="):
            return _show(evaluate(inside[1:], env))
        return shown.get(inside, m.group(0))

    return _PLACEHOLDER.sub(fill, text)


def _show(x: float) -> str:
    """A number as a quiz text shows it: 2 not 2.0, six significant digits at most."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"
