"""RocketMQ's SQL92 message filter: a boolean expression over a message's properties.

The grammar is RocketMQ's (a subset of SQL92's WHERE clause), each condition a property on the
left and literals on the right: ``= <> !=`` against any literal but NULL, ``> >= < <=`` and
``BETWEEN a AND b`` against numbers (RocketMQ refuses strings there, and a BETWEEN whose low
bound is above its high one), ``IN (...)`` of strings,
``IS [NOT] NULL``, RocketMQ 5's ``CONTAINS``, ``STARTSWITH`` and ``ENDSWITH``, each with
``NOT``, combined with ``AND``, ``OR``, ``NOT`` and parentheses. Literals are strings in single
quotes (``''`` is a quote), integers, decimals, ``TRUE``, ``FALSE`` and ``NULL``. Properties are
strings: a comparison with a number compares the property as a number (plain decimal
notation), and is unknown when it is not one. As in SQL, a missing property makes a
comparison unknown, ``NOT`` of unknown is unknown, and only a true result takes the message.

A filter runs on the broker for every message a consumer reads, so an expression holds at
most 256 conditions and IN values, and each property is read as a number once per message.

>>> f = SqlFilter.parse("a > 5 AND (b = 'x' OR c IS NULL)")
>>> f.matches({"a": "7", "b": "x"}), f.matches({"a": "7", "c": "1"}), f.matches({"b": "x"})
(True, False, False)
>>> SqlFilter.parse("region IN ('eu', 'us') AND NOT name STARTSWITH 'tmp'").matches(
...     {"region": "eu", "name": "order-1"})
True
"""

import dataclasses
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import TypeAlias

__all__ = ["SqlFilter", "SqlFilterError", "parse_cached"]

Value: TypeAlias = "str | Decimal | bool | None"
# Three-valued logic: None is unknown.
Truth: TypeAlias = "bool | None"
Node: TypeAlias = "Callable[[_Message], Truth]"

MAX_EXPRESSION_LENGTH = 8192
# Parentheses and NOTs nest no deeper: evaluation recurses as deep.
MAX_NESTING = 64
MAX_TERMS = 256
# Tokens enough for MAX_TERMS conditions: reading stops there.
MAX_TOKENS = 8 * MAX_TERMS
_PROPERTY_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class _Message:
    """One message's properties while a filter runs: each read as a number at most once."""

    __slots__ = ("_numbers", "props")

    def __init__(self, props: Mapping[str, str]) -> None:
        self.props = props
        self._numbers: dict[str, Decimal | None] = {}

    def number(self, name: str) -> Decimal | None:
        try:
            return self._numbers[name]
        except KeyError:
            pass
        text = self.props.get(name)
        value = None
        if text is not None and _PROPERTY_NUMBER.fullmatch(text.strip()):
            value = _number(text)
        self._numbers[name] = value
        return value


class SqlFilterError(ValueError):
    """An expression that does not parse."""


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<number>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[lLdDfF]?)
      | (?P<op><>|!=|>=|<=|=|>|<|\(|\)|,)
      | (?P<word>[A-Za-z_$][A-Za-z0-9_.$]*)
    )""",
    re.VERBOSE | re.ASCII,
)
_KEYWORDS = frozenset(
    {
        "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
        "CONTAINS", "STARTSWITH", "ENDSWITH",
    }
)  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string, number, op, word, keyword, end
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    out = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            out.append(_Token("end", "", pos))
            return out
        if len(out) >= MAX_TOKENS:
            raise SqlFilterError(f"more than {MAX_TOKENS} words and symbols")
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise SqlFilterError(f"unexpected {text[pos : pos + 10]!r} at {pos}")
        kind = match.lastgroup or ""
        token = match.group(kind)
        if kind == "word" and token.upper() in _KEYWORDS:
            out.append(_Token("keyword", token.upper(), match.start(kind)))
        else:
            out.append(_Token(kind, token, match.start(kind)))
        pos = match.end()


def _number(text: str) -> Decimal | None:
    try:
        value = Decimal(text.strip().rstrip("lLdDfF"))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _compare(m: _Message, name: str, literal: Value, test: Callable[[int], bool]) -> Truth:
    """``test`` of the ordering of a property against a literal (-1, 0, 1), or unknown."""
    prop = m.props.get(name)
    if prop is None or literal is None:
        return None
    if isinstance(literal, bool):
        if prop.lower() not in ("true", "false"):
            return None
        ordering = (prop.lower() == "true") - literal
        return test(ordering)
    if isinstance(literal, Decimal):
        number = m.number(name)
        if number is None:
            return None
        return test((number > literal) - (number < literal))
    return test((prop > literal) - (prop < literal))


def _junction(parts: list[Node], *, decisive: bool) -> Node:
    """OR (``decisive`` True: one true part decides) or AND (one false part decides) in
    three-valued logic: without a deciding part, an unknown part makes the whole unknown."""
    if len(parts) == 1:
        return parts[0]

    def junction(m: _Message) -> Truth:
        unknown = False
        for part in parts:
            value = part(m)
            if value is decisive:
                return decisive
            unknown = unknown or value is None
        return None if unknown else not decisive

    return junction


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0
        self.depth = 0
        self.terms = 0

    def term(self, count: int = 1) -> None:
        self.terms += count
        if self.terms > MAX_TERMS:
            raise SqlFilterError(f"more than {MAX_TERMS} conditions and IN values")

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise SqlFilterError(f"parentheses and NOTs nest deeper than {MAX_NESTING}")

    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def keyword(self, *words: str) -> bool:
        token = self.peek()
        if token.kind == "keyword" and token.text in words:
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> _Token:
        token = self.take()
        if token.kind != kind or (text is not None and token.text != text):
            want = text or kind
            raise SqlFilterError(
                f"expected {want} at {token.at}, found {token.text or 'the end'!r}"
            )
        return token

    def parse(self) -> Node:
        node = self.or_()
        if self.peek().kind != "end":
            token = self.peek()
            raise SqlFilterError(f"unexpected {token.text!r} at {token.at}")
        return node

    def or_(self) -> Node:
        parts = [self.and_()]
        while self.keyword("OR"):
            parts.append(self.and_())
        return _junction(parts, decisive=True)

    def and_(self) -> Node:
        parts = [self.not_()]
        while self.keyword("AND"):
            parts.append(self.not_())
        return _junction(parts, decisive=False)

    def not_(self) -> Node:
        if self.keyword("NOT"):
            self.nested()
            inner = self.not_()
            self.depth -= 1

            def negated(m: _Message) -> Truth:
                value = inner(m)
                return None if value is None else not value

            return negated
        return self.predicate()

    def literal(self) -> Value:
        token = self.take()
        if token.kind == "string":
            return token.text[1:-1].replace("''", "'")
        if token.kind == "number":
            value = _number(token.text)
            if value is None:
                raise SqlFilterError(f"bad number {token.text!r} at {token.at}")
            return value
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            return token.text == "TRUE"
        if token.kind == "keyword" and token.text == "NULL":
            return None
        raise SqlFilterError(f"expected a value at {token.at}, found {token.text or 'the end'!r}")

    def predicate(self) -> Node:
        token = self.peek()
        if token.kind == "op" and token.text == "(":
            self.take()
            self.nested()
            node = self.or_()
            self.expect("op", ")")
            self.depth -= 1
            return node
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            self.take()
            constant: Truth = token.text == "TRUE"
            return lambda m: constant
        name = self.expect("word").text
        return self.condition(name)

    def condition(self, name: str) -> Node:
        self.term()
        if self.keyword("IS"):
            negate = self.keyword("NOT")
            self.expect("keyword", "NULL")
            return lambda m: (name in m.props) if negate else (name not in m.props)
        negate = self.keyword("NOT")
        node = self.positive_condition(name, negate)

        def maybe_negated(m: _Message) -> Truth:
            value = node(m)
            if negate and value is not None:
                return not value
            return value

        return maybe_negated

    def positive_condition(self, name: str, after_not: bool) -> Node:
        if self.keyword("BETWEEN"):
            low = self.ordered_literal()
            self.expect("keyword", "AND")
            high = self.ordered_literal()
            if low > high:
                raise SqlFilterError(
                    f"Illegal values of between, left value({low}) must less than or equal to "
                    f"right value({high})"
                )

            def between(m: _Message) -> Truth:
                above = _compare(m, name, low, lambda o: o >= 0)
                below = _compare(m, name, high, lambda o: o <= 0)
                if above is None or below is None:
                    return None
                return above and below

            return between
        if self.keyword("IN"):
            self.expect("op", "(")
            texts = {self.text_literal("IN")}
            while self.peek().kind == "op" and self.peek().text == ",":
                self.take()
                self.term()
                texts.add(self.text_literal("IN"))
            self.expect("op", ")")

            def within(m: _Message) -> Truth:
                prop = m.props.get(name)
                return None if prop is None else prop in texts

            return within
        for word, test in (
            ("CONTAINS", str.__contains__),
            ("STARTSWITH", str.startswith),
            ("ENDSWITH", str.endswith),
        ):
            if self.keyword(word):
                value = self.text_literal(word)

                def text_test(
                    m: _Message,
                    test: Callable[[str, str], bool] = test,
                    value: str = value,
                ) -> Truth:
                    prop = m.props.get(name)
                    return None if prop is None else test(prop, value)

                return text_test
        if after_not:
            token = self.peek()
            raise SqlFilterError(f"expected BETWEEN, IN or a text test after NOT at {token.at}")
        token = self.take()
        tests: dict[str, Callable[[int], bool]] = {
            "=": lambda o: o == 0,
            "<>": lambda o: o != 0,
            "!=": lambda o: o != 0,
            ">": lambda o: o > 0,
            ">=": lambda o: o >= 0,
            "<": lambda o: o < 0,
            "<=": lambda o: o <= 0,
        }
        if token.kind != "op" or token.text not in tests:
            raise SqlFilterError(f"expected a comparison at {token.at}, found {token.text!r}")
        compare = tests[token.text]
        literal: Value
        if token.text in ("=", "<>", "!="):
            at = self.peek().at
            literal = self.literal()
            if literal is None:
                raise SqlFilterError(f"'NULL' at {at} cannot be compared: use IS [NOT] NULL")
        else:
            literal = self.ordered_literal()
        return lambda m: _compare(m, name, literal, compare)

    def text_literal(self, after: str) -> str:
        """A string literal, as RocketMQ's grammar takes after IN and the text tests."""
        at = self.peek().at
        value = self.literal()
        if not isinstance(value, str):
            raise SqlFilterError(f"{after} takes strings, found {value!r} at {at}")
        return value

    def ordered_literal(self) -> Decimal:
        """A literal an ordering compares with: a number (RocketMQ: "cannot be compared")."""
        at = self.peek().at
        value = self.literal()
        if not isinstance(value, Decimal):
            raise SqlFilterError(f"value {value!r} at {at} cannot be compared: not a number")
        return value


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class SqlFilter:
    """A parsed expression; :meth:`matches` takes a message's properties."""

    expression: str
    _node: Node

    @classmethod
    def parse(cls, expression: str) -> "SqlFilter":
        """Raises :class:`SqlFilterError` for an expression that does not parse."""
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise SqlFilterError(f"the expression is longer than {MAX_EXPRESSION_LENGTH}")
        if not expression.strip():
            raise SqlFilterError("the expression is empty")
        return cls(expression, _Parser(expression).parse())

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self._node(_Message(properties)) is True


_CACHE: dict[str, SqlFilter | SqlFilterError] = {}
_CACHE_SIZE = 1024


def parse_cached(expression: str) -> SqlFilter:
    """:meth:`SqlFilter.parse`, remembered: consumers send the same expression with every pull
    or receive, and a long one takes milliseconds to parse (or to refuse)."""
    found = _CACHE.get(expression)
    if found is None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        try:
            found = SqlFilter.parse(expression)
        except SqlFilterError as e:
            found = e
        _CACHE[expression] = found
    if isinstance(found, SqlFilterError):
        raise SqlFilterError(str(found))
    return found
