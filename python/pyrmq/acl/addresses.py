"""RocketMQ's white remote address patterns: the client addresses an account, or every
account, accepts without a signature.

A pattern is one of: blank (matches nothing); ``*`` (everything); an exact address; several
exact addresses separated by commas; ``192.168.1.{1,5,9}`` (the last part from a set); or
IPv4 parts each ``*``, a number or an inclusive range ``a-b``, as in ``192.168.1-3.*`` or
``10.10.*`` (missing parts after a ``*`` match anything). IPv6 ranges, as RocketMQ reads them,
fix a prefix of groups and give the next one as ``*`` or a hexadecimal range, any groups after
it ``*``: ``2001:db8:0:0:0:0:0:*``, ``2001:db8::1-ff`` or ``2001:db8::a-b:*`` (a ``::`` in the
prefix fills it with zero groups up to the range's place: the last group, or the one before a
trailing ``*``), or ``2001:db8:*`` (the third group anything, the rest unchecked).
"""

import ipaddress
from collections.abc import Callable, Iterable

__all__ = ["AddressPatternError", "address_matcher"]


class AddressPatternError(ValueError):
    """A white remote address pattern that RocketMQ would not accept either."""


def address_matcher(pattern: str | None) -> Callable[[str], bool]:
    """A predicate over client hosts (no port) for ``pattern``."""
    if pattern is not None and not isinstance(pattern, str):
        raise AddressPatternError(f"{pattern!r} is not an address pattern")
    text = (pattern or "").strip()
    if not text:
        return lambda host: False
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda host: True
    if text.endswith("}"):
        head, brace, last = text.rpartition("{")
        if not brace or not head or head[-1] not in ".:":
            raise AddressPatternError(f"bad address set {text!r}: expected a.b.c.{{x,y}}")
        hosts = _addresses(head + part.strip() for part in last[:-1].split(",") if part.strip())
        if not hosts:
            raise AddressPatternError(f"empty address set {text!r}")
        return hosts.__contains__
    if "," in text:
        return _addresses(part.strip() for part in text.split(",") if part.strip()).__contains__
    if ("*" in text or "-" in text) and ":" in text:
        return _ipv6_range_matcher(text)
    if "*" in text or "-" in text:
        return _range_matcher(text)
    (exact,) = _addresses([text])
    return lambda host: host == exact


def _addresses(texts: Iterable[str]) -> frozenset[str]:
    out = set()
    for text in texts:
        try:
            out.add(str(ipaddress.ip_address(text)))
        except ValueError:
            raise AddressPatternError(f"{text!r} is not an IP address") from None
    return frozenset(out)


def _range_matcher(text: str) -> Callable[[str], bool]:
    parts = text.split(".")
    if len(parts) > 4 or (len(parts) < 4 and parts[-1] != "*"):
        raise AddressPatternError(f"bad address range {text!r}: expected four IPv4 parts")
    parts += ["*"] * (4 - len(parts))
    bounds = [_part_bounds(part, text) for part in parts]

    def match(host: str) -> bool:
        numbers = host.split(".")
        if len(numbers) != 4:
            return False
        for number, (low, high) in zip(numbers, bounds, strict=True):
            if not number.isdigit() or not low <= int(number) <= high:
                return False
        return True

    return match


def _part_bounds(part: str, text: str) -> tuple[int, int]:
    part = part.strip()
    if part == "*":
        return 0, 255
    low, dash, high = part.partition("-")
    try:
        bounds = (int(low), int(high) if dash else int(low))
    except ValueError:
        raise AddressPatternError(f"bad address part {part!r} in {text!r}") from None
    if not 0 <= bounds[0] <= bounds[1] <= 255:
        raise AddressPatternError(f"bad address part {part!r} in {text!r}")
    return bounds


def _ipv6_range_matcher(text: str) -> Callable[[str], bool]:
    groups = [g.strip() for g in text.split(":")]
    at = next(i for i, g in enumerate(groups) if g == "*" or "-" in g)
    if any(g != "*" for g in groups[at + 1 :]):
        raise AddressPatternError(f"bad address range {text!r}: only * may follow the range")
    head = groups[:at]
    if "" in head:
        # A :: in the prefix: zero groups up to the range's place.
        place = 8 - (len(groups) - at)
        first = head.index("")
        left = head[:first]
        right = [g for g in head[first:] if g]
        if len(left) + len(right) >= place:
            raise AddressPatternError(f"bad address range {text!r}: too many groups")
        head = left + ["0"] * (place - len(left) - len(right)) + right
    if len(head) >= 8:
        raise AddressPatternError(f"bad address range {text!r}: too many groups")
    prefix = [_hex_group(g, text) for g in head]
    low, dash, high = groups[at].partition("-")
    bounds = (0, 0xFFFF) if groups[at] == "*" else (_hex_group(low, text), _hex_group(high, text))
    if dash and bounds[0] > bounds[1]:
        raise AddressPatternError(f"bad address range {text!r}: {groups[at]} is empty")
    where = len(prefix)

    def match(host: str) -> bool:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return False
        value = int(address)
        parts = [(value >> (16 * (7 - i))) & 0xFFFF for i in range(8)]
        return parts[:where] == prefix and bounds[0] <= parts[where] <= bounds[1]

    return match


def _hex_group(group: str, text: str) -> int:
    if not 1 <= len(group) <= 4:
        raise AddressPatternError(f"bad address group {group!r} in {text!r}")
    try:
        return int(group, 16)
    except ValueError:
        raise AddressPatternError(f"bad address group {group!r} in {text!r}") from None
