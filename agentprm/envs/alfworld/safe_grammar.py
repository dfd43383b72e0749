"""Games are data, not code: TextWorld derives a game's text from the grammar embedded in its `game.tw-pddl` and
evaluates every `{...}` expression in it with Python's `eval` (`textgen.EvalSymbol.derive`), so a crafted game file
runs arbitrary code when it is played. ALFWorld's grammar needs only attribute reads, string
concatenation and `or` (`{o.name}`, `{r.name or r.id}`, `{o.indefinite + ' ' + o.name}`); this module evaluates
exactly that subset by walking the expression's syntax tree — names of the derivation's variables, public
attributes, string/number constants, `+`, `and`/`or` — and refuses anything else with an error naming the
expression. `install()` replaces `EvalSymbol.derive`; every env applies it, with or without the speed-ups.
"""
from __future__ import annotations

import ast
import functools

_installed = False


class UnsafeExpression(Exception):
    """Not a ValueError: TextWorld turns a ValueError during a step into "Nothing happens.", which would hide the
    refusal; this one fails the step, so the episode is an env error (loud: eval's --max-errors)."""


@functools.lru_cache(maxsize=4096)
def _parse(expression: str) -> ast.expr:
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as e:
        raise UnsafeExpression(f"grammar expression {{{expression}}}: not an expression ({e.msg})") from None
    _check(tree, expression)
    return tree


def _check(node: ast.AST, expression: str) -> None:
    if isinstance(node, ast.Name):
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
        return
    if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        return _check(node.value, expression)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        _check(node.left, expression)
        return _check(node.right, expression)
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, expression)
        return
    raise UnsafeExpression(f"grammar expression {{{expression}}}: {type(node).__name__} is not allowed in a game "
                           "file (only names, public attributes, constants, + and and/or)")


def _value(node: ast.expr, variables: dict):
    if isinstance(node, ast.Name):
        if node.id not in variables:
            raise UnsafeExpression(f"grammar expression: unknown name {node.id!r}")
        return variables[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        return getattr(_value(node.value, variables), node.attr)
    if isinstance(node, ast.BinOp):
        return _value(node.left, variables) + _value(node.right, variables)
    assert isinstance(node, ast.BoolOp)
    result = None
    for value in node.values:
        result = _value(value, variables)
        if isinstance(node.op, ast.Or) == bool(result):   # or: first truthy; and: first falsy
            return result
    return result


def evaluate(expression: str, variables: dict):
    """The value of a grammar expression over the derivation's variables; UnsafeExpression for anything else."""
    return _value(_parse(expression), variables)


def install() -> None:
    global _installed
    if _installed:
        return
    from textworld.envs.pddl import textgen

    def derive(self, context=None):
        context = context or self.context
        return [textgen.TerminalSymbol(evaluate(self.expression, context["variables"]))]

    textgen.EvalSymbol.derive = derive
    _installed = True
