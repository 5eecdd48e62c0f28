"""Tests for lk.quantity (resource.Quantity)."""

import unittest
from fractions import Fraction

from lk.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    canonical,
    format_quantity,
    parse_quantity,
    parse_quantity_format,
    quantity_milli_value,
    quantity_value,
)


class ParseTest(unittest.TestCase):
    CASES = [
        # text, value, format, canonical text
        ("0", Fraction(0), DECIMAL_SI, "0"),
        ("1", Fraction(1), DECIMAL_SI, "1"),
        ("100m", Fraction(1, 10), DECIMAL_SI, "100m"),
        ("1500m", Fraction(3, 2), DECIMAL_SI, "1500m"),
        ("1.5", Fraction(3, 2), DECIMAL_SI, "1500m"),
        ("0.1", Fraction(1, 10), DECIMAL_SI, "100m"),
        (".5", Fraction(1, 2), DECIMAL_SI, "500m"),
        ("5.", Fraction(5), DECIMAL_SI, "5"),
        ("+3k", Fraction(3000), DECIMAL_SI, "3k"),
        ("-2", Fraction(-2), DECIMAL_SI, "-2"),
        ("2000", Fraction(2000), DECIMAL_SI, "2k"),
        ("1500", Fraction(1500), DECIMAL_SI, "1500"),
        ("1M", Fraction(10**6), DECIMAL_SI, "1M"),
        ("1G", Fraction(10**9), DECIMAL_SI, "1G"),
        ("1T", Fraction(10**12), DECIMAL_SI, "1T"),
        ("1P", Fraction(10**15), DECIMAL_SI, "1P"),
        ("1E", Fraction(10**18), DECIMAL_SI, "1E"),
        ("1000E", Fraction(10**21), DECIMAL_SI, "1000E"),
        ("1u", Fraction(1, 10**6), DECIMAL_SI, "1u"),
        ("1n", Fraction(1, 10**9), DECIMAL_SI, "1n"),
        ("0.5n", Fraction(1, 10**9), DECIMAL_SI, "1n"),  # rounded up to a whole nano
        ("1Ki", Fraction(1024), BINARY_SI, "1Ki"),
        ("1Mi", Fraction(2**20), BINARY_SI, "1Mi"),
        ("1Gi", Fraction(2**30), BINARY_SI, "1Gi"),
        ("512Mi", Fraction(512 * 2**20), BINARY_SI, "512Mi"),
        ("1.5Gi", Fraction(3 * 2**29), BINARY_SI, "1536Mi"),
        ("1023Ki", Fraction(1023 * 1024), BINARY_SI, "1023Ki"),
        ("0.5Ki", Fraction(512), BINARY_SI, "512"),  # below 1024: decimal
        ("1Ti", Fraction(2**40), BINARY_SI, "1Ti"),
        ("1Pi", Fraction(2**50), BINARY_SI, "1Pi"),
        ("1Ei", Fraction(2**60), BINARY_SI, "1Ei"),
        ("1e3", Fraction(1000), DECIMAL_EXPONENT, "1e3"),
        ("1E3", Fraction(1000), DECIMAL_EXPONENT, "1e3"),
        ("1e-3", Fraction(1, 1000), DECIMAL_EXPONENT, "1e-3"),
        ("12e6", Fraction(12 * 10**6), DECIMAL_EXPONENT, "12e6"),
        ("1.5e3", Fraction(1500), DECIMAL_EXPONENT, "1500"),
    ]

    def test_cases(self):
        for text, value, fmt, canon in self.CASES:
            with self.subTest(text=text):
                self.assertEqual(parse_quantity(text), value)
                self.assertEqual(parse_quantity_format(text), (value, fmt))
                self.assertEqual(canonical(text), canon)
                # the canonical form is a fixed point with the same value
                self.assertEqual(parse_quantity(canon), value)
                self.assertEqual(canonical(canon), canon)

    def test_numbers(self):
        self.assertEqual(parse_quantity(3), Fraction(3))
        self.assertEqual(parse_quantity(0.25), Fraction(1, 4))
        self.assertEqual(format_quantity(Fraction(1, 4)), "250m")
        self.assertEqual(format_quantity(Fraction(3 * 2**30), BINARY_SI), "3Gi")
        self.assertEqual(format_quantity(Fraction(-1536), BINARY_SI), "-1536")
        self.assertEqual(format_quantity(0), "0")

    JUNK = [
        "", " ", "abc", "1ki", "1KI", "1 Gi", " 1", "1 ", ".", "1..2", "1.2.3", "1e", "1e+",
        "--1", "+-1", "1Kib", "e3", "Gi", "1Gi1", "0x10", "1,5", "1m5", "١", None, [], {},
        True, float("nan"), float("inf"), "1e100000",
    ]

    def test_junk(self):
        for text in self.JUNK:
            with self.subTest(text=text):
                with self.assertRaises(ValueError):
                    parse_quantity(text)

    def test_value_rounding(self):
        self.assertEqual(quantity_value("100m"), 1)
        self.assertEqual(quantity_value("1"), 1)
        self.assertEqual(quantity_value("1.2"), 2)
        self.assertEqual(quantity_value("-1.2"), -2)
        self.assertEqual(quantity_value("2Gi"), 2 * 2**30)
        self.assertEqual(quantity_milli_value("100m"), 100)
        self.assertEqual(quantity_milli_value("1.5"), 1500)
        self.assertEqual(quantity_milli_value("1n"), 1)
        self.assertEqual(quantity_milli_value(Fraction(1, 4)), 250)

    def test_ordering(self):
        vals = ["1Gi", "1G", "999M", "100m", "1", "1Ki", "1k"]
        got = sorted(vals, key=parse_quantity)
        self.assertEqual(got, ["100m", "1", "1k", "1Ki", "999M", "1G", "1Gi"])


if __name__ == "__main__":
    unittest.main()
