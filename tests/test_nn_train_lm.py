"""`localkit train-lm`: the stdlib corpus (deterministic, split by file) and a tiny training run."""
import json

import numpy as np
import pytest
from scipy.stats import entropy

import torch  # noqa: F401  (the test extras install it)

from localkit.nn import train_lm  # noqa: E402
from localkit.nn.data import stdlib_corpus, stdlib_files  # noqa: E402

TINY = ["--steps", "4", "--max-files", "20", "--context", "16", "--d-model", "16", "--heads", "2",
        "--layers", "1", "--batch-size", "4", "--eval-every", "2", "--eval-windows", "8", "--no-progress"]


def test_corpus_is_deterministic_and_split_by_file():
    files = stdlib_files()
    assert files == sorted(files) and all(f.read_bytes().isascii() for f in files)
    corpus = stdlib_corpus(max_files=20)
    assert not set(corpus.train_files) & set(corpus.val_files)
    assert corpus.val_files == [files[9].name, files[19].name]
    assert len(corpus.train) + len(corpus.val) == sum(f.stat().st_size for f in files[:20])
    again = stdlib_corpus(max_files=20)
    assert np.array_equal(corpus.train, again.train) and np.array_equal(corpus.val, again.val)


def test_unigram_entropy():
    corpus = stdlib_corpus(max_files=20)
    h, cross = corpus.unigram_bits()
    assert h == pytest.approx(entropy(np.bincount(corpus.train), base=2), rel=1e-12)
    assert cross > h - 0.5 and 3.0 < h < 6.0
    with pytest.raises(ValueError, match="val_every"):
        stdlib_corpus(val_every=1)


@pytest.mark.parametrize("kernel", ["softmax", "local-linear"])
def test_train_lm_tiny(kernel, tmp_path, capsys):
    log = tmp_path / "curve.json"
    assert train_lm.main(train_lm._parse(["--kernel", kernel, "--log", str(log)] + TINY)) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert last.startswith("val_bpc=")
    bpc = float(last.split("=")[1])
    result = json.loads(log.read_text())
    assert result["val_bpc"] == pytest.approx(bpc, abs=1e-4)
    assert [p["step"] for p in result["curve"]] == [2, 4]
    assert 0 < bpc < 8  # at most the uniform code over the 128 ASCII characters, plus slack for 4 steps


def test_train_lm_bad_arguments():
    with pytest.raises(SystemExit, match="divisible"):
        train_lm.main(train_lm._parse(["--d-model", "10", "--heads", "4"]))
    with pytest.raises(SystemExit, match="--steps"):
        train_lm.main(train_lm._parse(["--steps", "0"]))
    with pytest.raises(SystemExit):
        train_lm._parse(["--kernel", "cosine"])
