"""A real corpus available offline: the source text of Python's standard library.

The selection is documented and deterministic for a given Python version: the top-level ``*.py``
files of ``sysconfig.get_paths()["stdlib"]`` (no sub-packages, no tests), sorted by name, keeping
the files that are pure ASCII (so a byte is a character and the vocabulary is the 128 ASCII
codes). The held-out split is by file: every ``val_every``-th file of that sorted list (indices
``val_every - 1, 2 val_every - 1, ...``) is validation text, the others are training text.
"""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VOCAB_SIZE = 128  # ASCII


def stdlib_files(root=None):
    """The sorted top-level ASCII ``*.py`` files of the standard library."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = [f for f in sorted(root.glob("*.py")) if f.read_bytes().isascii()]
    if not files:
        raise FileNotFoundError(f"no ASCII *.py files found in the standard library directory {root}")
    return files


@dataclass
class Corpus:
    train: np.ndarray  # uint8 character codes
    val: np.ndarray
    train_files: list
    val_files: list

    def unigram_bits(self):
        """``(entropy, cross_entropy)`` in bits per character: the entropy of the training
        characters' frequencies, and the held-out cross-entropy of that unigram model
        (add-one smoothed over the ASCII vocabulary) — the bar a language model must beat."""
        counts = np.bincount(self.train, minlength=VOCAB_SIZE).astype(float)
        p = counts / counts.sum()
        entropy = float(-(p[p > 0] * np.log2(p[p > 0])).sum())
        smoothed = (counts + 1) / (counts.sum() + VOCAB_SIZE)
        return entropy, float(-np.log2(smoothed[self.val]).mean())


def stdlib_corpus(val_every=10, max_files=None, root=None):
    """The :class:`Corpus` of the standard library's source (``max_files``: the first files only, for quick runs)."""
    if val_every < 2:
        raise ValueError(f"val_every must be >= 2, got {val_every}")
    files = stdlib_files(root)[:max_files]
    if len(files) < val_every:
        raise ValueError(f"need at least val_every={val_every} files for a held-out file, got {len(files)}")
    val = [f for i, f in enumerate(files) if i % val_every == val_every - 1]
    train = [f for i, f in enumerate(files) if i % val_every != val_every - 1]
    read = lambda fs: np.frombuffer(b"".join(f.read_bytes() for f in fs), dtype=np.uint8).copy()
    return Corpus(read(train), read(val), [f.name for f in train], [f.name for f in val])
