import pytest
from hypothesis import given
from hypothesis import strategies as st

from traces.units import format_size, parse_size, parse_size_range


def test_sizes_as_people_write_them():
    assert parse_size("8") == parse_size("8B") == 8
    assert parse_size("64K") == parse_size("64KiB") == 65536
    assert parse_size("1MiB") == 1 << 20
    assert parse_size("8GiB") == 8 << 30
    assert parse_size("1.5GB") == 1_500_000_000


@pytest.mark.parametrize("bad", ["", "MiB", "1 XB", "-4", "1e3"])
def test_bad_size_names_the_text(bad):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(bad)


def test_ranges_double_like_nccl_tests():
    sizes = parse_size_range("8B:8GiB")
    assert sizes[0] == 8 and sizes[-1] == 8 << 30 and len(sizes) == 31
    assert parse_size_range("1K:1M:4") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert parse_size_range("1K,3K") == [1024, 3072]


@pytest.mark.parametrize("bad", ["1M:1K", "1K:1M:1", "1:2:3:4", "1MiB:1GiB:1.5"])
def test_bad_ranges_are_refused_with_the_range_in_the_message(bad):
    with pytest.raises(ValueError, match=f"{bad}"):
        parse_size_range(bad)


@given(st.integers(min_value=0, max_value=1 << 45))
def test_format_then_parse_round_trips(n):
    assert parse_size(format_size(n)) == n


def test_one_rule_bare_and_binary_units_are_powers_of_two_si_units_powers_of_ten():
    assert parse_size("1G") == parse_size("1GiB") == parse_size("1g") == 1 << 30  # nccl-tests' -e 1G
    assert parse_size("1GB") == 10**9 and parse_size("1gb") == 10**9
    assert parse_size("1M") == parse_size("1MiB") == 1 << 20 and parse_size("1MB") == 10**6
    assert parse_size("1.5K") == 1536 and parse_size("0.5KiB") == 512


@pytest.mark.parametrize("fraction", ["1.3B", "0.5B", "1.0000001K", "0.1KiB"])
def test_a_fraction_of_a_byte_is_refused_not_rounded(fraction):
    with pytest.raises(ValueError, match=f"not a whole number of bytes: '{fraction}'"):
        parse_size(fraction)


UNIT_SCALES = {"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "KB": 1000, "M": 1 << 20, "MiB": 1 << 20,
               "MB": 10**6, "G": 1 << 30, "GiB": 1 << 30, "GB": 10**9, "T": 1 << 40, "TiB": 1 << 40, "TB": 10**12}


@given(st.integers(min_value=0, max_value=1 << 20), st.sampled_from(sorted(UNIT_SCALES)),
       st.integers(min_value=0, max_value=3))
def test_every_unit_scales_whole_and_decimal_numbers_exactly(n, unit, decimals):
    text = f"{n / 10**decimals:.{decimals}f}{unit}" if decimals else f"{n}{unit}"
    if (n * UNIT_SCALES[unit]) % 10**decimals:
        with pytest.raises(ValueError, match="not a whole number of bytes"):
            parse_size(text)
    else:
        assert parse_size(text) == n * UNIT_SCALES[unit] // 10**decimals
