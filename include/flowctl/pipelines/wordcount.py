"""The word-count pipeline: what a record means and how it is counted.

A record's value is one line of UTF-8 text. A word is a maximal run of letters
(Unicode word characters other than digits and ``_``), lower-cased; the key
of a word is the word itself. Invalid UTF-8 bytes decode to U+FFFD, which is
not a letter, so a damaged record still counts its readable words and every
reader (the stream, the reconcile job, the tests) counts it the same way.

:func:`count_words` is the plain-Python reference: the streaming results must
equal it exactly.

:data:`DEFINITION` runs the pipeline in a flow-controlled topology (see
:mod:`flowctl.pipelines.base`): a tuple's result is its ``{word: count}``
dict. It writes no SQL: ``include/pipelines/wordcount.toml`` declares the
``word_counts`` table with the ``sum`` rule (:mod:`flowctl.pipelines.sinks`),
whose upsert adds counts exactly as the direct sink's does
(:func:`flowctl.adapters.results.add_counts`), so both paths store identical
numbers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowctl.pipelines.base import Record

NAME = "wordcount"

_WORD = re.compile(r"[^\W\d_]+")


def decode(value: bytes | str) -> str:
    """A record value as a line of text (invalid UTF-8 becomes U+FFFD, a separator)."""
    if isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", errors="replace")


def words(line: str) -> list[str]:
    """The line's words, lower-cased, in order."""
    return [w.lower() for w in _WORD.findall(line)]


def key(word: str) -> str:
    """The grouping key of a word (the word itself)."""
    return word


def count_words(lines: Iterable[bytes | str]) -> Counter[str]:
    """Word counts of ``lines`` (text or raw record values): the reference result."""
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(key(w) for w in words(decode(line)))
    return counts


def count_values(values: Iterable[bytes | None]) -> Counter[str]:
    """:func:`count_words` of raw record values, computed on all of them at once.

    Joining the values with ``\\n`` (never part of a word, and never part of a
    multi-byte UTF-8 sequence, so decoding errors cannot cross a record) and
    scanning the text once is several times faster than line by line, and
    gives the same counts. ``None`` values (tombstones) have no words.
    """
    text = b"\n".join(v for v in values if v is not None).decode("utf-8", errors="replace")
    return Counter([key(w.lower()) for w in _WORD.findall(text)])


def apply_records(url_or_engine: Any, pipeline: str, records: Iterable[Any]) -> Any:
    """Word-count raw records ``(topic, partition, offset, value)`` not yet applied, add
    the counts and advance the checkpoint in one transaction
    (:func:`flowctl.adapters.results.apply_new_records` with this module's tokeniser);
    returns its :class:`~flowctl.adapters.results.BatchOutcome`."""
    from flowctl.adapters import results as sink

    return sink.apply_new_records(url_or_engine, pipeline, records, count_words)


def _checked_counts(result: Any) -> Mapping[str, int]:
    """A tuple result as ``{word: count}``; anything else is refused, naming the entry.

    Results come back from memcached as JSON: a corrupted or foreign item
    must fail the flush with a clear message, not add nonsense to the counts.
    """
    if not isinstance(result, Mapping):
        raise ValueError(f"wordcount result={result!r} is not a mapping of word -> count")
    for word, n in result.items():
        if not isinstance(word, str) or not word:
            raise ValueError(f"wordcount result: word={word!r} is not a non-empty string")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"wordcount result: count of word={word!r} is {n!r}, not an int >= 1")
    return result


class WordCountDefinition:
    """``DEFINITION`` of the word-count pipeline (see :mod:`flowctl.pipelines.base`)."""

    name = NAME

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        """The tuple's word counts: :func:`count_values` of its values.

        Word counting accepts every input (bad UTF-8 is a separator), so this
        never raises :class:`~flowctl.pipelines.base.PoisonRecord`.
        """
        return dict(count_values(r.value for r in records))

    def combine(self, results: Sequence[Any]) -> dict[str, int]:
        """The counts of consecutive parts of a tuple, added: the count of the whole."""
        total: Counter[str] = Counter()
        for result in results:
            total.update(_checked_counts(result))
        return dict(total)

    def reference(self, values: Iterable[bytes | None]) -> dict[str, int]:
        """Word counts of the whole input (what ``word_counts`` must hold)."""
        return dict(count_values(values))


DEFINITION = WordCountDefinition()


def synthetic_lines(count: int, seed: int) -> Iterator[str]:
    """Demo input for ``flowctl ingest``: seeded Zipf text (see :mod:`flowctl.textgen`)."""
    from flowctl.textgen import zipf_lines

    return zipf_lines(count, seed=seed)
