"""Demo text for the word-count pipeline: seeded, Zipf-distributed lines.

Natural text has a Zipf word distribution (a few words very frequent, a long
tail of rare ones), which is what makes per-key load skewed in a real
word count. The generator is deterministic for a given seed, so a test, a
benchmark and the reconcile DAG can regenerate exactly the text that was
ingested. Lines are 50-100 bytes of lowercase ASCII words, like the paper's
"fast word count" input (SPEC, Experiments 1).
"""

from __future__ import annotations

import itertools
import random
import string
from collections.abc import Iterator

_LETTERS = string.ascii_lowercase


class TextGenError(ValueError):
    """A generator argument is out of range; the message names it."""


def vocabulary(size: int, seed: int) -> list[str]:
    """``size`` distinct pseudo-words of 3-10 letters, deterministic for ``seed``."""
    if size < 1:
        raise TextGenError(f"vocabulary size must be >= 1, got {size!r}")
    rng = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        words.setdefault("".join(rng.choices(_LETTERS, k=rng.randint(3, 10))))
    return list(words)


def zipf_lines(
    count: int,
    *,
    seed: int = 7,
    vocab_seed: int | None = None,
    vocab_size: int = 5000,
    exponent: float = 1.1,
    min_bytes: int = 50,
    max_bytes: int = 100,
) -> Iterator[str]:
    """Yield ``count`` lines whose words follow Zipf's law with ``exponent``.

    The vocabulary comes from ``vocab_seed`` (default ``seed``): a feeder that
    varies ``seed`` per batch but keeps ``vocab_seed`` writes new text in the
    same language. Word of rank ``r`` (1-based) is drawn with probability proportional to
    ``1 / r**exponent``. Each line's length is uniform in
    ``[min_bytes, max_bytes]`` (whole words only, separated by one space).
    """
    if count < 0:
        raise TextGenError(f"count must be >= 0, got {count!r}")
    if exponent <= 0:
        raise TextGenError(f"exponent must be > 0, got {exponent!r}")
    if min_bytes < 1 or max_bytes < min_bytes + 10:
        # Words are up to 10 letters: with 10 bytes of slack every line can be closed.
        raise TextGenError(
            f"need 1 <= min_bytes and max_bytes >= min_bytes + 10, got min_bytes={min_bytes!r}, "
            f"max_bytes={max_bytes!r}"
        )
    words = vocabulary(vocab_size, seed if vocab_seed is None else vocab_seed)
    cum_weights = list(itertools.accumulate(1.0 / (r**exponent) for r in range(1, vocab_size + 1)))
    rng = random.Random(seed + 1)
    for _ in range(count):
        target = rng.randint(min_bytes, max_bytes)
        parts: list[str] = []
        length = -1  # no separator before the first word
        while length < min_bytes or (length < target and length + 4 <= max_bytes):
            word = rng.choices(words, cum_weights=cum_weights)[0]
            if length + 1 + len(word) > max_bytes:
                if length >= min_bytes:
                    break
                continue  # too long for this line: draw another word
            parts.append(word)
            length += 1 + len(word)
        yield " ".join(parts)


def file_records(path: str, *, skip_empty: bool = False) -> Iterator[bytes]:
    """Yield a file's lines as records: the bytes as they are, without the line ending.

    One record per line (ended by ``\\n`` or ``\\r\\n``; a last line without one counts).
    Nothing is decoded or repaired: a line that is not valid UTF-8 reaches the pipeline
    as it is, fails there and lands in the dead-letter topic with its reason, instead of
    being silently rewritten. Empty lines are records too, unless ``skip_empty``.
    """
    with open(path, "rb") as handle:
        for line in handle:
            if line.endswith(b"\n"):
                line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            if line or not skip_empty:
                yield line
