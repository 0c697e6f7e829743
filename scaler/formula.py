"""KEDA's ``scalingModifiers.formula``: the subset of the expr language (expr-lang/expr) the replay evaluates.

KEDA evaluates the formula with expr over the triggers' values by trigger
name. There is no Python implementation of expr, so this is a small
Pratt parser for the arithmetic and conditional part of it, evaluated on
arrays (one value per poll) at once. Accepted:

* numbers (``4``, ``0.5``), trigger names (letters, digits, ``_``),
  parentheses;
* ``+ - * / %`` and ``**`` / ``^`` (power), unary ``-`` and ``+``;
* ``== != < <= > >=``, ``&&`` / ``and``, ``||`` / ``or``, ``!`` / ``not``;
* the conditional ``cond ? a : b``;
* ``min(a, b, ...)``, ``max(a, b, ...)``, ``abs(x)``, ``ceil(x)``, ``floor(x)``, ``round(x)``.

Anything else (strings, ``??``, member access, other builtins) is a clear
error naming it. Operands are typed: arithmetic takes numbers, ``&& || !``
and the condition take booleans, and the formula must give a number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

ACCEPTED = ("numbers, trigger names, ( ), + - * / % ** ^, == != < <= > >=, && || ! (and, or, not), "
            "cond ? a : b, min(), max(), abs(), ceil(), floor(), round()")

_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|==|!=|<=|>=|&&|\|\||\?\?|[-+*/%^()<>!?:,]))")
_FUNCS: dict[str, Callable] = {"abs": np.abs, "ceil": np.ceil, "floor": np.floor, "round": np.round}
_BINARY = {  # operator: (binding power, operand type, result type, function)
    "||": (1, "bool", "bool", np.logical_or), "or": (1, "bool", "bool", np.logical_or),
    "&&": (2, "bool", "bool", np.logical_and), "and": (2, "bool", "bool", np.logical_and),
    "==": (3, "num", "bool", np.equal), "!=": (3, "num", "bool", np.not_equal),
    "<": (4, "num", "bool", np.less), "<=": (4, "num", "bool", np.less_equal),
    ">": (4, "num", "bool", np.greater), ">=": (4, "num", "bool", np.greater_equal),
    "+": (5, "num", "num", np.add), "-": (5, "num", "num", np.subtract),
    "*": (6, "num", "num", np.multiply), "/": (6, "num", "num", np.divide), "%": (6, "num", "num", np.fmod),
    "**": (8, "num", "num", np.power), "^": (8, "num", "num", np.power),
}
_TERNARY_BP = 0.5
# expr-lang/expr v1.17.8 (KEDA v2.21.0's): its builtins and words, the names a formula may use besides triggers
EXPR_NAMES = frozenset((
    "all none any one filter map find findIndex findLast findLastIndex count sum groupBy sortBy reduce len type "
    "abs ceil floor round int float string trim trimPrefix trimSuffix upper lower split splitAfter replace repeat "
    "join indexOf lastIndexOf hasPrefix hasSuffix max min mean median toJSON fromJSON toBase64 fromBase64 now "
    "duration date timezone first last get take keys values toPairs fromPairs reverse uniq concat flatten sort "
    "bitnot bitand bitor bitxor bitnand bitshl bitshr bitushr true false nil and or not in matches contains "
    "startsWith endsWith let if else").split())


class FormulaError(ValueError):
    """A formula outside the supported subset: the message names the spot and what is accepted."""


@dataclass(frozen=True)
class Formula:
    """A parsed formula: ``names`` it reads, ``evaluate({name: array})`` -> array of the same shape."""

    text: str
    names: tuple[str, ...]
    evaluate: Callable[[Mapping[str, np.ndarray]], np.ndarray]


def parse(text: str, known: tuple[str, ...]) -> Formula:
    """Parse ``text`` over the trigger names ``known``; raises ``FormulaError``."""
    toks: list[str] = []
    pos = 0
    s = text.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise FormulaError(f"unexpected {s[pos:pos + 12].strip()!r} at character {pos}; accepted: {ACCEPTED}")
        toks.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    if not toks:
        raise FormulaError(f"the formula is empty; accepted: {ACCEPTED}")
    p = _Parser(toks, known)
    kind, fn = p.expr(0)
    if p.i < len(toks):
        raise FormulaError(f"unexpected {toks[p.i]!r} after a complete expression; accepted: {ACCEPTED}")
    if kind != "num":
        raise FormulaError("the formula gives true/false, not a number (KEDA needs a number)")
    return Formula(text, tuple(dict.fromkeys(p.used)), lambda env: np.asarray(fn(env), dtype=np.float64))


def within_subset(text: str, known: tuple[str, ...]) -> bool:
    """Whether ``text`` is written in the subset's tokens and names alone (then a ``parse`` error is one KEDA's expr
    makes too; outside it, expr may accept what ``parse`` refuses)."""
    pos, s = 0, text.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m or m.end() == pos or m.group(3) == "??":
            return False
        if m.group(2) and m.group(2) not in (*known, "min", "max", *_FUNCS, "and", "or", "not"):
            return False
        pos = m.end()
    return True


def keda_problem(text: str, names: tuple[str, ...]) -> str:
    """Why KEDA's expr would not compile ``text`` over the trigger ``names`` ("" when it would, or may: a formula
    outside the replay's subset is only checked for unknown names)."""
    bare = re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|`[^`]*`", "''", text)
    bound = set(re.findall(r"\blet\s+([A-Za-z_]\w*)\s*=", bare))
    for m in re.finditer(r"(?<![\w.$#])([A-Za-z_]\w*)\s*(\()?", bare):
        word, call = m.group(1), m.group(2)
        if word in EXPR_NAMES or word in bound or (not call and ("{" in bare or word in names)):
            continue
        if call:
            return (f"unknown function {word}(): KEDA's expr has no such builtin (min, max, abs, ceil, floor, round, "
                    f"mean, median, ... are; no sqrt or log)")
        return (f"unknown name {word!r}: a formula reads triggers by their name; named triggers here: "
                f"{', '.join(names) or '(none: give the triggers names)'}")
    try:
        parse(text, names)
    except FormulaError as e:
        return str(e) if within_subset(text, names) else ""
    return ""


class _Parser:
    def __init__(self, toks: list[str], known: tuple[str, ...]):
        self.toks, self.i, self.known = toks, 0, known
        self.used: list[str] = []

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        t = self.peek()
        if t is None or (want is not None and t != want):
            raise FormulaError(f"expected {want or 'more'!r}, got {t or 'the end'!r}; accepted: {ACCEPTED}")
        self.i += 1
        return t

    def expr(self, min_bp: float) -> tuple[str, Callable]:
        kind, fn = self.prefix()
        while True:
            t = self.peek()
            if t == "?" and min_bp < _TERNARY_BP:
                self.take("?")
                _need(kind, "bool", "the condition before '?'")
                k1, a = self.expr(0)
                self.take(":")
                k2, b = self.expr(_TERNARY_BP - 0.01)
                if k1 != k2:
                    raise FormulaError("both branches of 'cond ? a : b' must be numbers (or both true/false)")
                kind, fn = k1, (lambda env, c=fn, a=a, b=b: np.where(c(env), a(env), b(env)))
                continue
            if t not in _BINARY:
                if t is not None and t not in (")", ",", ":", "?"):
                    raise FormulaError(f"unsupported operator {t!r}; accepted: {ACCEPTED}")
                return kind, fn
            bp, operand, result, op = _BINARY[t]
            if bp <= min_bp:
                return kind, fn
            self.take()
            right_bp = bp - 0.01 if t in ("**", "^") else bp  # power is right-associative
            k2, rhs = self.expr(right_bp)
            _need(kind, operand, f"the left side of {t!r}")
            _need(k2, operand, f"the right side of {t!r}")
            kind, fn = result, (lambda env, f=fn, g=rhs, op=op: op(f(env), g(env)))

    def prefix(self) -> tuple[str, Callable]:
        t = self.take()
        if t[0].isdigit() or t[0] == ".":
            v = float(t)
            return "num", (lambda env, v=v: v)
        if t in ("-", "+"):
            k, f = self.expr(7)
            _need(k, "num", f"unary {t!r}")
            return "num", ((lambda env, f=f: -f(env)) if t == "-" else f)
        if t in ("!", "not"):
            k, f = self.expr(7)
            _need(k, "bool", f"{t!r}")
            return "bool", (lambda env, f=f: np.logical_not(f(env)))
        if t == "(":
            k, f = self.expr(0)
            self.take(")")
            return k, f
        if t in ("min", "max", *_FUNCS) and self.peek() == "(":
            self.take("(")
            args = [self.expr(0)]
            while self.peek() == ",":
                self.take(",")
                args.append(self.expr(0))
            self.take(")")
            for k, _ in args:
                _need(k, "num", f"an argument of {t}()")
            fns = [f for _, f in args]
            if t in _FUNCS:
                if len(fns) != 1:
                    raise FormulaError(f"{t}() takes one argument, got {len(fns)}")
                return "num", (lambda env, g=_FUNCS[t], f=fns[0]: g(f(env)))
            red = np.maximum if t == "max" else np.minimum
            return "num", (lambda env, red=red, fs=fns: _reduce(red, [f(env) for f in fs]))
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t):
            if t not in self.known:
                raise FormulaError(f"unknown name {t!r}: the formula reads triggers by name; named triggers here: "
                                   f"{', '.join(self.known) or '(none)'} (functions: min, max, {', '.join(_FUNCS)})")
            self.used.append(t)
            return "num", (lambda env, t=t: env[t])
        raise FormulaError(f"unexpected {t!r}; accepted: {ACCEPTED}")


def _need(kind: str, want: str, what: str) -> None:
    if kind != want:
        raise FormulaError(f"{what} must be {'a number' if want == 'num' else 'true/false (a comparison)'}")


def _reduce(op, xs: list) -> np.ndarray:
    out = xs[0]
    for x in xs[1:]:
        out = op(out, x)
    return out
