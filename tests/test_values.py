"""specguard/values.py: the command-line values every command and the pytest options share."""

from __future__ import annotations

import argparse
import math

import pytest

from specguard.values import ValueTextError, arg_type, names, numbers, positive_floats, positive_ints


def test_positive_ints_take_a_trailing_comma_and_reject_the_rest_naming_the_flag():
    assert positive_ints("--concurrency", "1,4,16,") == [1, 4, 16]
    for bad in ("1,x", "", "0,4", "-1", "1.5"):
        with pytest.raises(ValueTextError, match=r"^--concurrency .*: use comma-separated positive integers"):
            positive_ints("--concurrency", bad)


def test_positive_floats_refuse_zero_and_infinity_numbers_keep_them():
    assert positive_floats("--request-rate", "2,8.5") == [2.0, 8.5]
    for bad in ("0", "inf", "nan", "a"):
        with pytest.raises(ValueTextError, match="--request-rate"):
            positive_floats("--request-rate", bad)
    got = numbers("--prior-dof", "0,inf")
    assert got[0] == 0.0 and math.isinf(got[1])
    assert names(" a, b,,") == ["a", "b"]


def test_argparse_words_a_bad_value_as_one_usage_line():
    p = argparse.ArgumentParser(prog="x", exit_on_error=False)
    p.add_argument("--concurrency", type=arg_type(positive_ints, "--concurrency"))
    assert p.parse_args(["--concurrency", "2,4"]).concurrency == [2, 4]
    with pytest.raises(argparse.ArgumentError, match="use comma-separated positive integers, e.g. 1,4,16"):
        p.parse_args(["--concurrency", "x"])
