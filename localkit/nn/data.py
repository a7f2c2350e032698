"""Corpora for ``localkit train-lm``: the standard library's source (offline, the default), or the
user's own text file or folder.

The selection is documented and deterministic for a given Python version: the top-level ``*.py``
files of ``sysconfig.get_paths()["stdlib"]`` (no sub-packages, no tests), sorted by name, keeping
the files that are pure ASCII (so a byte is a character and the vocabulary is the 128 ASCII
codes). The held-out split is by file: every ``val_every``-th file of that sorted list (indices
``val_every - 1, 2 val_every - 1, ...``) is validation text, the others are training text.

A user's corpus (:func:`text_corpus`) is a UTF-8 text file or a folder of them (read
recursively, sorted, hidden files skipped); with at least ``val_every`` files it is split by file
in the same way, otherwise its last tenth is held out. Its vocabulary is the 128 ASCII codes if
every byte is ASCII, else the 256 byte values.
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
    vocab_size: int = VOCAB_SIZE
    source: str = "stdlib source"

    def unigram_bits(self):
        """``(entropy, cross_entropy)`` in bits per character: the entropy of the training
        characters' frequencies, and the held-out cross-entropy of that unigram model
        (add-one smoothed over the vocabulary) — the bar a language model must beat."""
        counts = np.bincount(self.train, minlength=self.vocab_size).astype(float)
        p = counts / counts.sum()
        entropy = float(-(p[p > 0] * np.log2(p[p > 0])).sum())
        smoothed = (counts + 1) / (counts.sum() + self.vocab_size)
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


def _is_text(path):
    try:
        path.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    return True


def text_files(path):
    """``[path]`` for a file, or the sorted UTF-8 text files under a folder (hidden ones skipped)."""
    path = Path(path)
    if path.is_file():
        if not _is_text(path):
            raise ValueError(f"{path} is not UTF-8 text")
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or folder: {path}")
    files = [f for f in sorted(path.rglob("*")) if f.is_file()
             and not any(part.startswith(".") for part in f.relative_to(path).parts) and _is_text(f)]
    if not files:
        raise FileNotFoundError(f"no UTF-8 text files under {path}")
    return files


def text_corpus(path, val_every=10):
    """The :class:`Corpus` of a user's text file or folder (see the module's docstring)."""
    files = text_files(path)
    read = lambda fs: np.frombuffer(b"".join(f.read_bytes() for f in fs), dtype=np.uint8).copy()
    if len(files) >= val_every:
        val = [f for i, f in enumerate(files) if i % val_every == val_every - 1]
        train = [f for i, f in enumerate(files) if i % val_every != val_every - 1]
        data_train, data_val = read(train), read(val)
    else:
        text = read(files)
        cut = len(text) - len(text) // 10
        data_train, data_val, train, val = text[:cut], text[cut:], files, files
    vocab = VOCAB_SIZE if max(data_train.max(initial=0), data_val.max(initial=0)) < VOCAB_SIZE else 256
    return Corpus(data_train, data_val, [f.name for f in train], [f.name for f in val], vocab, str(path))
