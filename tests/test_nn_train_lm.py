"""`localkit train-lm`: the stdlib corpus (deterministic, split by file), tiny training runs, usage
errors before training, checkpoint and resume after an interruption, the user's own text."""
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


def test_bad_options_and_paths_are_usage_errors_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train_lm, "train", lambda *a, **k: pytest.fail("training started"))
    (tmp_path / "folder").mkdir()
    for argv, message in ((["--d-model", "10", "--heads", "4"], "divisible"),
                          (["--steps", "0"], "--steps"),
                          (["--log", str(tmp_path / "missing" / "log.json")], "does not exist"),
                          (["--checkpoint", str(tmp_path / "folder")], "is a folder"),
                          (["--resume"], "--resume needs"),
                          (["--resume", "--checkpoint", str(tmp_path / "none.pt")], "--resume needs"),
                          (["--data", str(tmp_path / "nothing")], "no such file"),
                          (["--device", "nonsense"], "--device"),
                          (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--steps", "-1"], "")):
        with pytest.raises(SystemExit) as exc:
            train_lm.main(train_lm._parse(argv))
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: localkit train-lm") and message in err


def _run(argv, capsys):
    code = train_lm.main(train_lm._parse(argv))
    return code, capsys.readouterr()


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path, capsys, monkeypatch):
    """Ctrl-C at step 3 saves a checkpoint; --resume continues at step 3 and ends exactly where an
    uninterrupted run of the same settings ends (same batches, same optimiser state)."""
    base = ["--kernel", "gaussian", "--steps", "6", "--eval-every", "2"] + TINY[2:]
    _, whole = _run(base + ["--log", str(tmp_path / "whole.json")], capsys)
    checkpoint = tmp_path / "run.pt"
    progress = train_lm._progress

    def interrupt(step, *args):
        if step == 3:
            raise KeyboardInterrupt
        progress(step, *args)

    monkeypatch.setattr(train_lm, "_progress", interrupt)
    code, first = _run(base + ["--checkpoint", str(checkpoint)], capsys)
    assert code == 130 and "interrupted at step 3" in first.out and checkpoint.is_file()
    monkeypatch.setattr(train_lm, "_progress", progress)
    code, second = _run(base + ["--checkpoint", str(checkpoint), "--resume", "--log", str(tmp_path / "r.json")],
                        capsys)
    assert code == 0 and "resumed from" in second.out and "at step 3" in second.out
    resumed = json.loads((tmp_path / "r.json").read_text())
    reference = json.loads((tmp_path / "whole.json").read_text())
    assert [p["step"] for p in resumed["curve"]] == [2, 4, 6] and resumed["steps"] == 6
    assert resumed["val_bpc"] == pytest.approx(reference["val_bpc"], abs=1e-6)
    # other settings cannot resume this checkpoint
    with pytest.raises(SystemExit):
        train_lm.main(train_lm._parse(base + ["--d-model", "32", "--checkpoint", str(checkpoint), "--resume"]))


def test_own_text_folder_device_dtype_and_tokens_per_second(tmp_path, capsys):
    corpus = tmp_path / "texts"
    corpus.mkdir()
    for i in range(3):  # fewer than 10 files: the last tenth is held out
        (corpus / f"{i}.txt").write_text("the localization method, une méthode locale. " * 40)
    (corpus / "image.bin").write_bytes(bytes(range(256)) * 4)  # not UTF-8: skipped
    argv = ["--data", str(corpus), "--device", "cpu", "--dtype", "bfloat16", "--steps", "3", "--context", "16",
            "--d-model", "16", "--heads", "2", "--layers", "1", "--batch-size", "4", "--eval-windows", "8"]
    code, out = _run(argv, capsys)
    assert code == 0 and "3 train files" in out.out and "bfloat16" in out.out
    assert "tokens/s" in out.err
    bpc = float(out.out.strip().splitlines()[-1].split("=")[1])
    assert 0 < bpc < 9  # at most the uniform code over 256 byte values (é is not ASCII), plus slack
