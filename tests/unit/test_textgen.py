"""The demo text generator: seeded, Zipf-shaped, lines of 50-100 bytes."""

from __future__ import annotations

from collections import Counter

import pytest

from flowctl.textgen import TextGenError, file_records, vocabulary, zipf_lines


def test_same_seed_same_text() -> None:
    assert list(zipf_lines(200, seed=3)) == list(zipf_lines(200, seed=3))
    assert list(zipf_lines(200, seed=3)) != list(zipf_lines(200, seed=4))


def test_lines_are_whole_words_within_the_byte_bounds() -> None:
    lines = list(zipf_lines(2000, seed=5))
    assert all(50 <= len(line.encode()) <= 100 for line in lines)
    assert all(word.isalpha() and word.islower() for line in lines for word in line.split())


def test_word_frequencies_follow_the_ranks() -> None:
    counts = Counter(w for line in zipf_lines(5000, seed=1, vocab_size=200) for w in line.split())
    ranked = vocabulary(200, 1)
    # The most probable word is the most frequent; rank 1 beats rank 10 beats rank 100.
    assert counts.most_common(1)[0][0] == ranked[0]
    assert counts[ranked[0]] > counts[ranked[9]] > counts[ranked[99]]


def test_vocab_seed_keeps_the_language_across_text_seeds() -> None:
    language = set(vocabulary(300, 7))
    words = {
        w for line in zipf_lines(500, seed=99, vocab_seed=7, vocab_size=300) for w in line.split()
    }
    assert words <= language


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, r"count must be >= 0, got -1"),
        ({"count": 1, "exponent": 0}, r"exponent must be > 0, got 0"),
        ({"count": 1, "min_bytes": 50, "max_bytes": 55}, r"max_bytes=55"),
        ({"count": 1, "vocab_size": 0}, r"vocabulary size must be >= 1, got 0"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(TextGenError, match=message):
        list(zipf_lines(**kwargs))


def test_file_records_are_the_lines_bytes_as_they_are(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "book.txt"
    path.write_bytes(b"first line\r\n\nsecond \xff line\n\n  \nlast\rno newline")
    assert list(file_records(str(path))) == [
        b"first line",
        b"",
        b"second \xff line",
        b"",
        b"  ",
        b"last\rno newline",
    ]
    assert list(file_records(str(path), skip_empty=True)) == [
        b"first line",
        b"second \xff line",
        b"  ",
        b"last\rno newline",
    ]


def test_an_empty_file_has_no_records_and_a_lone_newline_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "f.txt"
    path.write_bytes(b"")
    assert list(file_records(str(path))) == []
    path.write_bytes(b"\n")
    assert list(file_records(str(path))) == [b""]
