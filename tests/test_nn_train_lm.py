"""`localkit train-lm`: the stdlib corpus (deterministic, split by file), tiny training runs, usage
errors before training, checkpoint and resume after an interruption, the user's own text."""
import json
import re

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


def test_comparison_with_the_unigram_says_worse_when_worse():
    assert train_lm.against_unigram(3.1, 4.5) == "1.400 bits better than the unigram frequencies"
    assert train_lm.against_unigram(6.91, 4.5) == "2.410 bits worse than the unigram frequencies"
    assert train_lm.against_unigram(4.5001, 4.5) == "no better than the unigram frequencies"


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
    assert "than the unigram frequencies" in out and not re.search(r"-\d+\.\d+ bits better", out)


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


def _interrupt_at(stop, monkeypatch):
    """Make train-lm's progress report raise KeyboardInterrupt (Ctrl-C) at step ``stop``; returns
    the original report."""
    progress = train_lm._progress

    def interrupt(step, *args):
        if step == stop:
            raise KeyboardInterrupt
        progress(step, *args)

    monkeypatch.setattr(train_lm, "_progress", interrupt)
    return progress


def test_interrupted_run_resumes_from_its_checkpoint(tmp_path, capsys, monkeypatch):
    """Ctrl-C at step 3 saves a checkpoint; --resume continues at step 3 and ends exactly where an
    uninterrupted run of the same settings ends (same batches, same optimiser state)."""
    base = ["--kernel", "gaussian", "--steps", "6", "--eval-every", "2"] + TINY[2:]
    _, whole = _run(base + ["--log", str(tmp_path / "whole.json")], capsys)
    checkpoint = tmp_path / "run.pt"
    progress = _interrupt_at(3, monkeypatch)
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
    assert "made with other options: --d-model 16 (not 32)" in capsys.readouterr().err  # as typed


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


@pytest.mark.parametrize("option,value", [("--lr", "-1"), ("--lr", "nan"), ("--lr", "inf"), ("--lr", "0"),
                                          ("--threads", "0"), ("--threads", "-2"), ("--seed", "-1"),
                                          ("--max-minutes", "nan"), ("--max-minutes", "inf"),
                                          ("--max-minutes", "-1"), ("--max-minutes", "0"), ("--ridge", "inf"),
                                          ("--ridge", "nan"), ("--steps", "1.5"), ("--batch-size", "0"),
                                          ("--context", "-3"), ("--max-files", "0"), ("--eval-every", "nan")])
def test_bad_numbers_are_usage_errors_naming_the_option(option, value, capsys, monkeypatch):
    """Every numeric option: NaN, infinity, and negative or zero values where they mean nothing
    are argparse's usage error, naming the option as typed, before training (issue 26: tracebacks
    from torch, or a run with a NaN time budget)."""
    from localkit.cli import main

    monkeypatch.setattr(train_lm, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exc:
        main(["train-lm", option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: localkit train-lm") and f"argument {option}: " in err and repr(value) in err
    assert "Traceback" not in err


def test_seed_zero_and_integral_options_are_accepted():
    args = train_lm._parse(["--seed", "0", "--threads", "1", "--lr", "1e-3", "--max-minutes", "0.5"])
    assert (args.seed, args.threads, args.lr, args.max_minutes) == (0, 1, 1e-3, 0.5)


@pytest.mark.parametrize("log", ["/dev/full", "/proc/version"])
def test_a_log_that_refuses_writes_is_a_usage_error_before_training(log, capsys, monkeypatch):
    """/dev/full opens but refuses writes (ENOSPC), a /proc file too (even for root): found by a
    test write, before training (issue 26: the whole run, then a traceback, no val_bpc line)."""
    monkeypatch.setattr(train_lm, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exc:
        train_lm.main(train_lm._parse(["--log", log]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: localkit train-lm") and f"--log {log}: cannot be written" in err


def test_a_checkpoint_that_is_not_a_regular_file_is_a_usage_error(capsys, monkeypatch):
    """A save replaces the checkpoint by a new file: ``/dev/null`` would be replaced (as root)."""
    monkeypatch.setattr(train_lm, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exc:
        train_lm.main(train_lm._parse(["--checkpoint", "/dev/null"]))
    assert exc.value.code == 2 and "--checkpoint /dev/null: is not a regular file" in capsys.readouterr().err


def test_a_log_write_that_fails_at_the_end_still_prints_val_bpc(capsys, monkeypatch):
    monkeypatch.setattr(train_lm, "_log_refused", lambda path: None)  # a disk that fills during the run
    code, out = _run(["--log", "/dev/full", "--steps", "2"] + TINY[2:], capsys)
    assert code == 1 and out.out.strip().splitlines()[-1].startswith("val_bpc=")
    assert "--log /dev/full: not written (No space left on device)" in out.err and "Traceback" not in out.err


def test_the_log_test_write_leaves_no_file_and_keeps_an_existing_one(tmp_path):
    assert train_lm._log_refused(tmp_path / "new.json") is None and not (tmp_path / "new.json").exists()
    (tmp_path / "old.json").write_text("{}")
    assert train_lm._log_refused(tmp_path / "old.json") is None and (tmp_path / "old.json").exists()


def test_ctrl_c_writes_the_log_of_the_steps_done(tmp_path, capsys, monkeypatch):
    _interrupt_at(3, monkeypatch)
    log = tmp_path / "partial.json"
    code, out = _run(["--log", str(log), "--steps", "6"] + TINY[2:], capsys)
    assert code == 130 and out.out.strip().splitlines()[-1] == "interrupted at step 3"
    partial = json.loads(log.read_text())
    assert partial["steps"] == 3 and [p["step"] for p in partial["curve"]] == [2]
    assert partial["val_bpc"] == partial["curve"][-1]["val_bpc"]


def test_sigint_during_training_exits_130_with_one_line_and_the_partial_log(tmp_path):
    """A real Ctrl-C (SIGINT) to ``python -m localkit train-lm`` once it has printed an estimate."""
    import signal
    import subprocess
    import sys

    log = tmp_path / "partial.json"
    argv = [sys.executable, "-m", "localkit", "train-lm", "--log", str(log), "--steps", "100000", "--threads", "1"]
    proc = subprocess.Popen(argv + TINY[2:], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # wait until training has begun: the first estimate
            if line.startswith("step 2: val"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert out.strip().splitlines()[-1].startswith("interrupted at step ")
    assert json.loads(log.read_text())["curve"][0]["step"] == 2


def test_runs_sharing_a_checkpoint_do_not_race_on_a_temporary_file(tmp_path):
    """Two runs saving one ``--checkpoint`` at once (issue 26: one died with FileNotFoundError, both
    writing ``run.pt.tmp``): each save has its own temporary file; the last complete one stays."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "run.pt"
    state = {"weights": torch.zeros(20_000)}

    def saves(run):
        for _ in range(30):
            train_lm._save(path, dict(state, run=run))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(saves, range(2)))  # re-raises a failed save
    assert torch.load(path)["run"] in (0, 1) and [p.name for p in tmp_path.iterdir()] == ["run.pt"]
