"""resource.Quantity parsing and canonical formatting (k8s.io/apimachinery/pkg/api/resource).

Pure functions.  Values are exact fractions.Fraction numbers.

    parse_quantity("100m") == Fraction(1, 10)
    parse_quantity_format("1Gi") == (Fraction(1073741824), "BinarySI")
    format_quantity(Fraction(3, 2), "DecimalSI") == "1500m"
    canonical("1.5Gi") == "1536Mi"
    quantity_value(q) (ceil to integer, as Quantity.Value()), quantity_milli_value(q)

Grammar (from quantity.go):
    <quantity>   ::= <sign>? <number> <suffix>
    <number>     ::= <digits> | <digits> "." <digits>? | "." <digits>
    <suffix>     ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|""|k|M|G|T|P|E | (e|E) <sign>? <digits>
Canonical form: BinarySI when the input used a binary suffix and the value is an integer of
magnitude >= 1024 (else DecimalSI); DecimalSI/DecimalExponent use the largest exponent that is a
multiple of 3 leaving an integer mantissa.  Precision below 1n is rounded up to a whole nano unit,
as kube does.
"""

import math
import re
from fractions import Fraction

__all__ = [
    "parse_quantity",
    "parse_quantity_format",
    "format_quantity",
    "canonical",
    "quantity_value",
    "quantity_milli_value",
    "BINARY_SI",
    "DECIMAL_SI",
    "DECIMAL_EXPONENT",
]

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}

_RE = re.compile(
    r"^(?P<sign>[+-])?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>(?:[eE][+-]?[0-9]+)|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|)$"
)

_NANO = Fraction(1, 10**9)


def parse_quantity_format(s):
    """Returns (value: Fraction, format) for a quantity string; ValueError on junk."""
    if isinstance(s, bool):
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    if isinstance(s, int):
        return Fraction(s), DECIMAL_SI
    if isinstance(s, float):
        if not math.isfinite(s):
            raise ValueError("quantity must be finite")
        return _round_nano(Fraction(s)), DECIMAL_SI
    if not isinstance(s, str):
        raise ValueError("quantity must be a string or number")
    m = _RE.match(s)
    if not m or len(s) > 100:
        raise ValueError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    num = Fraction(m.group("num") if not m.group("num").endswith(".") else m.group("num")[:-1])
    suffix = m.group("suffix")
    if suffix in _BINARY:
        value = num * (2 ** _BINARY[suffix])
        fmt = BINARY_SI
    elif suffix in _DECIMAL:
        value = num * Fraction(10) ** _DECIMAL[suffix]
        fmt = DECIMAL_SI
    else:
        exp = int(suffix[1:])
        if abs(exp) > 1000:
            raise ValueError("quantity exponent out of range")
        value = num * Fraction(10) ** exp
        fmt = DECIMAL_EXPONENT
    if m.group("sign") == "-":
        value = -value
    return _round_nano(value), fmt


def parse_quantity(s):
    """Parses a quantity ("100m", "1Gi", "1e3", 5) into an exact Fraction."""
    return parse_quantity_format(s)[0]


def _round_nano(v):
    """Kube keeps at most nano precision and rounds away from zero (1.5n -> 2n)."""
    scaled = v / _NANO
    if scaled.denominator == 1:
        return v
    r = math.ceil(abs(scaled))
    return Fraction(r if v > 0 else -r) * _NANO


def format_quantity(value, fmt=DECIMAL_SI):
    """Canonical text for a value in the given format (see module docstring)."""
    value = _round_nano(Fraction(value))
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    a = abs(value)
    if fmt == BINARY_SI and a.denominator == 1 and a >= 1024:
        n = a.numerator
        shift = 0
        while shift < 60 and n % 1024 == 0:
            n //= 1024
            shift += 10
        return sign + str(n) + _BINARY_BY_EXP.get(shift, "")
    # decimal: mantissa * 10^exp, exp a multiple of 3 in [-9, 18] for SI
    exp = 0
    while a.denominator != 1:
        a *= 1000
        exp -= 3
    n = a.numerator
    limit = 18 if fmt != DECIMAL_EXPONENT else 10**6
    while n % 1000 == 0 and exp + 3 <= limit:
        n //= 1000
        exp += 3
    if fmt == DECIMAL_EXPONENT:
        return sign + str(n) + ("" if exp == 0 else "e%d" % exp)
    return sign + str(n) + _DECIMAL_BY_EXP[exp]


def canonical(s):
    """Canonical form of a quantity string, as the API server would serialise it."""
    v, fmt = parse_quantity_format(s)
    return format_quantity(v, fmt)


def quantity_value(q):
    """Quantity.Value(): the value rounded up (away from zero) to an integer."""
    v = parse_quantity(q) if not isinstance(q, Fraction) else q
    return math.ceil(v) if v >= 0 else -math.ceil(-v)


def quantity_milli_value(q):
    """Quantity.MilliValue(): the value in thousandths, rounded up."""
    v = parse_quantity(q) if not isinstance(q, Fraction) else q
    m = v * 1000
    return math.ceil(m) if m >= 0 else -math.ceil(-m)
