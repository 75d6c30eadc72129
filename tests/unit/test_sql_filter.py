"""RocketMQ's SQL92 filter: what each form takes, three-valued logic, and refused input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq.sql_filter import SqlFilter, SqlFilterError

PROPS = {"a": "7", "b": "x", "price": "12.50", "name": "order-17", "flag": "true", "q": "it's"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a = 7", True),
        ("a = 7.0", True),
        ("a <> 7", False),
        ("a != 8", True),
        ("a > 5 AND a < 10", True),
        ("a >= 8", False),
        ("price <= 12.5", True),
        ("b = 'x'", True),
        ("b = 'X'", False),
        ("q = 'it''s'", True),
        ("a BETWEEN 7 AND 9", True),
        ("a NOT BETWEEN 1 AND 6", True),
        ("b IN ('y', 'x')", True),
        ("b NOT IN ('y', 'x')", False),
        ("missing IS NULL", True),
        ("a IS NOT NULL", True),
        ("name STARTSWITH 'order'", True),
        ("name ENDSWITH '18'", False),
        ("name CONTAINS 'der-1'", True),
        ("name NOT CONTAINS 'x'", True),
        ("flag = TRUE", True),
        ("NOT (a = 7 OR b = 'y')", False),
        ("(a = 1 OR b = 'x') AND NOT name ENDSWITH '9'", True),
        ("TRUE", True),
        ("a > 5 and b = 'x'", True),
    ],
)
def test_each_form_against_the_properties(expression: str, expected: bool) -> None:
    assert SqlFilter.parse(expression).matches(PROPS) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "missing = 1",
        "missing <> 1",
        "NOT missing = 1",
        "b > 5",  # not a number: unknown
        "missing BETWEEN 1 AND 2",
        "missing IN ('a')",
        "NOT missing IN ('a')",
        "missing STARTSWITH 'a'",
    ],
)
def test_an_unknown_result_never_takes_the_message(expression: str) -> None:
    assert SqlFilter.parse(expression).matches(PROPS) is False


def test_or_takes_what_one_side_knows_and_and_refuses_what_one_side_denies() -> None:
    assert SqlFilter.parse("missing = 1 OR a = 7").matches(PROPS)
    assert not SqlFilter.parse("missing = 1 AND a = 8").matches(PROPS)


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "   ",
        "a =",
        "a = 'open",
        "a == 1",
        "(a = 1",
        "a = 1)",
        "a BETWEEN 1",
        "a IN ()",
        "a NOT = 1",
        "a STARTSWITH 5",
        "a = 1 b = 2",
        "= 1",
        "a = 1.2.3",
        "a # 1",
        "(" * 100 + "a = 1" + ")" * 100,
        "NOT " * 100 + "a = 1",
        "a = '" + "x" * 9000 + "'",
        # RocketMQ orders numbers only.
        "b > 'w'",
        "a BETWEEN 'a' AND 'z'",
        "a >= TRUE",
        # RocketMQ's checks: bounds in order, NULL only with IS, IN of strings.
        "a BETWEEN 7 AND 3",
        "a NOT BETWEEN 2 AND 1.5",
        "a = NULL",
        "a <> NULL",
        "a IN (1, 2)",
        "a IN ('x', TRUE)",
        "a NOT IN ('x', NULL)",
        # Conditions are bounded: a filter runs for every message read.
        "a IN (" + ", ".join(["'x'"] * 300) + ")",
        " OR ".join(["a = 1"] * 300),
    ],
)
def test_an_expression_that_does_not_parse_is_refused(expression: str) -> None:
    with pytest.raises(SqlFilterError):
        SqlFilter.parse(expression)


@given(st.text(max_size=60))
def test_any_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        parsed = SqlFilter.parse(text)
    except SqlFilterError:
        return
    assert parsed.matches(PROPS) in (True, False)


@given(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6))
def test_numeric_comparisons_agree_with_python(prop: int, literal: int) -> None:
    props = {"n": str(prop)}
    for op, test in (("<", prop < literal), ("=", prop == literal), (">=", prop >= literal)):
        assert SqlFilter.parse(f"n {op} {literal}").matches(props) is test


@pytest.mark.parametrize("value", ["1_0", "7L", "\uff15", "0x10", "1e3x", ""])
def test_a_property_that_is_not_plain_decimal_is_no_number(value: str) -> None:
    for expression in ("n > 0", "n = 10", "n BETWEEN 5 AND 1000"):
        assert SqlFilter.parse(expression).matches({"n": value}) is False


def test_in_compares_the_property_as_text() -> None:
    f = SqlFilter.parse("v IN (" + ", ".join(f"'{i}'" for i in range(200)) + ", 'x')")
    assert f.matches({"v": "199"})
    assert f.matches({"v": "x"})
    assert not f.matches({"v": "7.0"})
    assert not f.matches({"v": "200"})
