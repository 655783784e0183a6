import click
import pytest

from xtask.drain.core.amounts import Amount, split_waves
from xtask.params import AmountType


@pytest.mark.parametrize(
    ("text", "total", "expected"),
    [("3", 10, 3), ("10%", 15, 2), ("1%", 5, 1), ("100%", 7, 7), ("0", 9, 0), ("0%", 9, 0)],
)
def test_amount_of_a_total(text, total, expected):
    assert Amount.parse(text).of(total) == expected


@pytest.mark.parametrize("text", ["", "-1", "1.5", "10 %", "%", "101%", "01", "1e3", "１"])
def test_bad_amounts_are_refused_naming_the_text(text):
    with pytest.raises(ValueError, match="is not a count|more than 100%"):
        Amount.parse(text)


def test_waves_keep_the_order_and_put_the_remainder_last():
    names = [f"p{i}" for i in range(7)]
    assert split_waves(names, Amount(3)) == [["p0", "p1", "p2"], ["p3", "p4", "p5"], ["p6"]]
    assert split_waves(names, Amount(50, percent=True)) == [names[:4], names[4:]]
    assert split_waves([], Amount(3)) == []


def test_the_option_type_enforces_a_minimum():
    with pytest.raises(click.BadParameter, match="less than 1"):
        AmountType(minimum=1).convert("0", None, None)
    assert AmountType(minimum=1).convert("20%", None, None) == Amount(20, percent=True)
