import pytest

from vramnb import format_bytes, parse_size
from vramnb._units import format_delta, format_seconds


@pytest.mark.parametrize(
    "n, text",
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (256 * 2**20, "256.0 MiB"), (2**30, "1.0 GiB"), (3 * 2**40, "3.0 TiB"),
     (2**50, "1024.0 TiB"), (-1536, "-1.5 KiB")],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_format_delta_and_seconds():
    assert format_delta(2**30) == "+1.0 GiB"
    assert format_delta(-(2**20)) == "-1.0 MiB"
    assert format_delta(0) == "±0 B"
    assert format_seconds(2e-4) == "200 µs"
    assert format_seconds(2.5) == "2.50 s"


@pytest.mark.parametrize(
    "text, n",
    [("24GiB", 24 * 2**30), ("24 gib", 24 * 2**30), ("80GB", 80 * 10**9), ("1.5M", 3 * 2**19), ("512", 512),
     ("0.5KiB", 512), (4096, 4096), ("2T", 2 * 2**40)],
)
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("bad", ["24XB", "", "GiB", "-1GiB", "0", "1.2.3GiB", "ten GB", 0, -5, True])
def test_parse_size_rejects_with_valid_units(bad):
    with pytest.raises(ValueError) as e:
        parse_size(bad)
    assert "invalid size" in str(e.value)
    if isinstance(bad, str) and bad.endswith("XB"):
        assert "GiB" in str(e.value) and "'XB'" in str(e.value)


def test_a_value_rounding_to_1024_of_a_unit_moves_up_a_unit():
    from vramnb._units import format_bytes

    assert format_bytes(2**20 - 1) == "1.0 MiB"  # was "1024.0 KiB"
    assert format_bytes(2**30 - 1) == "1.0 GiB"
    assert format_bytes(-(2**20 - 1)) == "-1.0 MiB"
    assert format_bytes(2**20 - 52) == "1023.9 KiB"
    assert format_bytes(2**20 - 1, precision=3) == "1023.999 KiB"


@pytest.mark.parametrize("fn", [format_bytes, format_delta, format_seconds])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_formatters_refuse_non_finite_numbers(fn, bad):
    with pytest.raises(ValueError, match="not a finite number"):
        fn(bad)


@pytest.mark.parametrize("fn", [format_bytes, format_delta, format_seconds])
@pytest.mark.parametrize("bad", ["3", None, True, 1 + 2j])
def test_formatters_refuse_what_is_not_a_number(fn, bad):
    with pytest.raises(TypeError, match="real number"):
        fn(bad)


def test_formatters_negative_and_numpy_values():
    np = pytest.importorskip("numpy")
    assert format_bytes(np.int64(2**20)) == "1.0 MiB"
    assert format_delta(np.int64(-1536)) == "-1.5 KiB"
    assert format_seconds(-2.5) == "-2.50 s"
    assert format_seconds(-2e-4) == "-200 µs"
