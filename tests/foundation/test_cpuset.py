"""The Linux cpuset list format: parse/format round trips and rejection of bad strings."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.cpuset import MAX_CPU_ID, CPUSetError, format_cpuset, parse_cpuset

cpu_sets = st.frozensets(st.integers(0, 4096), max_size=300)


@given(cpu_sets)
def test_round_trip_set(cpus: frozenset[int]) -> None:
    assert parse_cpuset(format_cpuset(cpus)) == cpus


@given(cpu_sets)
def test_format_is_canonical_and_shortest(cpus: frozenset[int]) -> None:
    text = format_cpuset(cpus)
    assert format_cpuset(parse_cpuset(text)) == text
    assert " " not in text
    # No two elements could be merged: consecutive runs are always one range.
    bounds = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        bounds.append((int(lo), int(hi or lo)))
        if hi:
            assert int(hi) > int(lo)
    for (_, prev_hi), (lo, _) in itertools.pairwise(bounds):
        assert lo > prev_hi + 1


@given(st.lists(st.integers(0, 512), max_size=50))
def test_format_accepts_duplicates_and_any_order(ids: list[int]) -> None:
    assert parse_cpuset(format_cpuset(ids)) == frozenset(ids)
    assert format_cpuset(ids) == format_cpuset(sorted(set(ids)))


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 20)), max_size=20))
def test_parse_any_well_formed_list(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{lo}-{lo + n}" if n else str(lo) for lo, n in ranges)
    want = {cpu for lo, n in ranges for cpu in range(lo, lo + n + 1)}
    assert parse_cpuset(text) == want


@pytest.mark.parametrize(("text", "cpus"), [
    ("", set()), ("  ", set()), ("0", {0}), ("0-3", {0, 1, 2, 3}),
    ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("3,1,2", {1, 2, 3}),
    ("1-1", {1}), ("0-1,1-2", {0, 1, 2}), (" 0-1 , 4 ", {0, 1, 4}), ("0-3\n", {0, 1, 2, 3}),
])
def test_parse_examples(text: str, cpus: set[int]) -> None:
    assert parse_cpuset(text) == cpus


@pytest.mark.parametrize(("cpus", "text"), [
    (set(), ""), ({0}, "0"), ({0, 1}, "0-1"), ({0, 1, 2, 3, 8}, "0-3,8"),
    ({0, 2, 4}, "0,2,4"), ({5, 6, 7, 1}, "1,5-7"),
])
def test_format_examples(cpus: set[int], text: str) -> None:
    assert format_cpuset(cpus) == text


@pytest.mark.parametrize("text", [
    ",", "0,", ",0", "0,,1", "a", "0-", "-1", "3-1", "1-2-3", "0x1", "1.5", "0 - 3 x",
    "1_0", "+1", "0-+3", "0 -3",
    f"0-{MAX_CPU_ID + 1}", "0-999999999999", "--", "1;2", "٣",
])
def test_bad_strings_raise(text: str) -> None:
    with pytest.raises(CPUSetError):
        parse_cpuset(text)


@given(st.text(max_size=20))
def test_arbitrary_text_parses_or_raises_cpuset_error(text: str) -> None:
    try:
        cpus = parse_cpuset(text)
    except CPUSetError:
        return
    assert all(0 <= c <= MAX_CPU_ID for c in cpus)
    assert parse_cpuset(format_cpuset(cpus)) == cpus


def test_cpuset_error_is_a_value_error() -> None:
    assert issubclass(CPUSetError, ValueError)
