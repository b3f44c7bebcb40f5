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
