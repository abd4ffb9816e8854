"""The Linux cpuset list format: parse/format round trips and rejection of bad strings."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.cpuset import (
    MAX_CPU_ID,
    CPUSetError,
    cpu_ranges,
    format_cpuset,
    parse_cpu_id,
    parse_cpuset,
)

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


# -- hostile input: any length, linear work, ids bounded by the node (issue 25) ----------

def _expanded(text: str, max_cpu: int = MAX_CPU_ID) -> int:
    """The CPU ids ``parse_cpuset`` materialises for ``text``: the sizes of the merged
    ranges it expands, each once."""
    return sum(hi - lo + 1 for lo, hi in cpu_ranges(text, max_cpu))


def test_64k_of_overlapping_ranges_expands_each_id_once() -> None:
    text = ",".join(["0-4095"] * 9000)  # 63 KiB, 9000 ranges over the same 4096 CPUs
    assert len(text) > 60_000
    assert cpu_ranges(text) == [(0, 4095)]
    assert _expanded(text) == 4096  # the old parser expanded 9000 × 4096 ids
    assert parse_cpuset(text) == frozenset(range(4096))


def test_overlapping_million_cpu_ranges_are_merged_before_any_expansion() -> None:
    text = ",".join([f"0-{MAX_CPU_ID}", f"5-{MAX_CPU_ID - 1}"] * 3000)
    assert cpu_ranges(text) == [(0, MAX_CPU_ID)]
    assert _expanded(text) == MAX_CPU_ID + 1


def test_work_grows_with_the_text_not_with_repetitions() -> None:
    # Interleaved and out of order, so that merging has work to do.
    one = ",".join(f"{i * 3}-{i * 3 + 4}" for i in reversed(range(1000)))
    for times in (1, 8):
        text = ",".join([one] * times)
        ranges = cpu_ranges(text)
        assert ranges == [(0, 3001)]
        assert _expanded(text) == 3002  # the same ids, however often they are named


@pytest.mark.parametrize("digits", [20, 4300, 4301, 5000, 100_000])
def test_numbers_of_any_length_are_a_cpuset_error(digits: int) -> None:
    number = "9" * digits
    for text in (number, f"0-{number}", f"{number}-{number}", f"1,{number}"):
        with pytest.raises(CPUSetError) as caught:
            parse_cpuset(text)
        assert len(str(caught.value)) < 200  # one short line, not the number back
    with pytest.raises(CPUSetError):
        parse_cpu_id(number)


def test_leading_zeros_do_not_count_as_digits() -> None:
    assert parse_cpuset("0" * 5000 + "7") == {7}
    assert parse_cpu_id("0" * 5000) == 0


def test_ids_past_the_node_are_refused_before_expansion() -> None:
    assert parse_cpuset("0-63", max_cpu=63) == frozenset(range(64))
    for text in ("64", "0-64", f"0-{MAX_CPU_ID}", "0-3,1000000"):
        with pytest.raises(CPUSetError, match="past the node's last CPU 63"):
            parse_cpuset(text, max_cpu=63)
    with pytest.raises(CPUSetError):
        cpu_ranges(f"0-{MAX_CPU_ID}", max_cpu=63)


def test_a_huge_bad_element_gives_a_short_message() -> None:
    text = "1," + "x" * 65536
    with pytest.raises(CPUSetError) as caught:
        parse_cpuset(text)
    assert len(str(caught.value)) < 200


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), min_size=1, max_size=40))
def test_cpu_ranges_are_sorted_disjoint_and_name_the_same_ids(
        ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{lo}-{lo + n}" for lo, n in ranges)
    merged = cpu_ranges(text)
    assert all(lo <= hi for lo, hi in merged)
    assert all(a_hi + 1 < b_lo for (_, a_hi), (b_lo, _) in itertools.pairwise(merged))
    assert {c for lo, hi in merged for c in range(lo, hi + 1)} == parse_cpuset(text)
    assert _expanded(text) == len(parse_cpuset(text))
