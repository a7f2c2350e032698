"""The command line and the package surface."""
import argparse
import importlib
import subprocess
import sys

import numpy as np
import pytest

import localkit
from localkit.cli import build_parser, main, write_section
from localkit.tour import format_table, run_tour
from localkit.tour._core import WARM_UP_SECONDS, Row, TourContext


def test_import_localkit_does_not_import_torch():
    code = "import sys, localkit; localkit.LocalMeanRegressor; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_python_dash_m_shows_the_subcommands():
    out = subprocess.run([sys.executable, "-m", "localkit", "--help"], capture_output=True, text=True, check=True)
    assert "tour" in out.stdout and "bench" in out.stdout


def test_tour_foundation_section_runs_within_tolerance(tmp_path):
    rows, failures = run_tour(tmp_path, only=["foundation"], echo=lambda *a: None)
    assert not failures
    assert len(rows) >= 5 and all(r.ok for r in rows)
    assert (tmp_path / "kernel_profiles.png").stat().st_size > 10_000


def test_tour_times_a_quick_row_after_one_untimed_run(monkeypatch):
    """A first call pays what a process pays once (numba's cache, imports): a quick row is run once
    untimed, then timed; a slow one (WARM_UP_SECONDS or more) is timed on its first run alone."""
    import localkit.tour._core as core

    seconds = iter([1.0, 0.25,  # quick: 1.0 untimed, then the run timed
                    3.0,  # slow, one run asked for: that run
                    5.0, 4.0, 6.0])  # slow, two runs asked for: 5.0 untimed, then the median of two
    monkeypatch.setattr(core, "median_time", lambda f, repeat: (f(), float(np.median(
        [next(seconds) for _ in range(repeat)]))))
    assert TourContext.timed(lambda: "quick") == ("quick", 0.25)
    assert TourContext.timed(lambda: "slow") == ("slow", 3.0)
    assert TourContext.timed(lambda: "slow, repeated", repeat=2) == ("slow, repeated", 5.0)
    assert next(seconds, None) is None and WARM_UP_SECONDS == 2.0


def test_unknown_tour_section_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown tour section"):
        run_tour(tmp_path, only=["nonsense"], echo=lambda *a: None)


def test_table_marks_rows_out_of_tolerance():
    table = format_table([Row("m", "a", "b", 1e-3, 0.1, 0.2, 1e-6)])
    assert "NO" in table


def test_write_section_replaces_only_its_own_block(tmp_path):
    results = tmp_path / "RESULTS.md"
    write_section(results, "a", "first", "cmd a")
    write_section(results, "b", "second", "cmd b")
    write_section(results, "a", "third", "cmd a")
    text = results.read_text()
    assert "third" in text and "second" in text and "first" not in text


def test_bench_parser_defaults():
    args = build_parser().parse_args(["bench", "--quick", "--only", "local_mean"])
    assert args.quick and args.only == ["local_mean"]


def test_train_lm_through_the_cli_takes_its_options(capsys):
    from localkit.cli import main

    argv = ["train-lm", "--kernel", "softmax", "--steps", "2", "--max-files", "20", "--batch-size", "4",
            "--context", "16", "--d-model", "16", "--heads", "2", "--layers", "1", "--eval-every", "2",
            "--eval-windows", "4", "--no-progress"]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("val_bpc=")


def _usage_error(capsys, argv):
    """Run the CLI; it must stop with argparse's usage error (exit status 2); return stderr."""
    from localkit.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: localkit") and "Traceback" not in err
    return err


def test_unknown_tour_section_is_a_usage_error_listing_the_sections(capsys, tmp_path):
    err = _usage_error(capsys, ["tour", "--out", str(tmp_path), "--only", "bogus"])
    assert "unknown tour section(s) bogus" in err and "foundation" in err and "trick" in err
    assert not any(tmp_path.iterdir())  # nothing ran


def test_unknown_benchmark_is_a_usage_error_listing_the_benchmarks(capsys, tmp_path):
    for name in ("alpha", "beta"):
        (tmp_path / f"bench_{name}.py").write_text("raise AssertionError('must not run')\n")
    err = _usage_error(capsys, ["bench", "--dir", str(tmp_path), "--only", "bogus", "alpha"])
    assert "unknown benchmark(s) bogus" in err and "alpha, beta" in err


def test_bench_outside_a_source_checkout_says_what_it_needs(capsys, tmp_path):
    err = _usage_error(capsys, ["bench", "--quick", "--dir", str(tmp_path / "benchmarks")])
    assert "source checkout" in err and "--dir" in err and 'pip install ".[bench]"' in err


def test_bench_runs_the_named_script_only(capsys, tmp_path):
    from localkit.cli import main

    (tmp_path / "bench_alpha.py").write_text("TITLE = 'A'\ndef run(quick):\n    return f'alpha quick={quick}'\n")
    (tmp_path / "bench_beta.py").write_text("raise AssertionError('must not run')\n")
    assert main(["bench", "--quick", "--dir", str(tmp_path), "--only", "alpha"]) == 0
    assert "alpha quick=True" in capsys.readouterr().out
    assert not (tmp_path / "RESULTS.md").exists()  # --quick leaves RESULTS.md alone


def test_tour_without_matplotlib_names_the_extra(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    err = _usage_error(capsys, ["tour"])
    assert "matplotlib" in err and 'pip install ".[plot]"' in err


def test_a_benchmark_with_nothing_to_measure_keeps_its_results(tmp_path, capsys):
    """A GPU benchmark on a machine without CUDA returns None: its section stays as a GPU wrote it."""
    from localkit.cli import main

    (tmp_path / "bench_gpu.py").write_text("def run(quick=False):\n    return None\n")
    section = "<!-- begin gpu -->\n| 233 G pairs/s |\n<!-- end gpu -->"
    (tmp_path / "RESULTS.md").write_text(f"# Benchmark results\n\n{section}\n")
    assert main(["bench", "--dir", str(tmp_path), "--only", "gpu"]) == 0
    assert section in (tmp_path / "RESULTS.md").read_text()
    assert "skipped on this machine" in capsys.readouterr().out


def test_write_sections_ending_together_keep_every_section(tmp_path):
    """Benchmarks that end together (several ``localkit bench --only ...``) each keep their section
    (issue 26: unlocked read-modify-write lost sections in 4-7 of 10 trials)."""
    from concurrent.futures import ThreadPoolExecutor

    results = tmp_path / "RESULTS.md"
    names = [f"bench{i}" for i in range(8)]

    def write(name):
        for round_ in range(5):
            write_section(results, name, f"| {name} round {round_} |", f"localkit bench --only {name}")

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(write, names))
    text = results.read_text()
    assert all(f"| {name} round 4 |" in text for name in names), text
    assert [p.name for p in tmp_path.iterdir()] == ["RESULTS.md"]  # no temporary or lock file left


@pytest.mark.parametrize("command", ["tour", "bench"])
def test_only_with_no_names_is_a_usage_error(command, capsys, tmp_path):
    """``--only`` with nothing after it ran everything (the whole tour, every benchmark)."""
    err = _usage_error(capsys, [command, "--only"] + (["--out", str(tmp_path)] if command == "tour" else []))
    assert "--only: expected at least one argument" in err


def test_tour_out_an_existing_file_is_a_usage_error(capsys, tmp_path):
    out = tmp_path / "figures"
    out.write_text("not a folder")
    err = _usage_error(capsys, ["tour", "--out", str(out), "--only", "foundation"])
    assert f"--out {out}: cannot be a folder for the figures" in err


def test_version_is_printed(capsys):
    import localkit

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"localkit {localkit.__version__}"


def _parsers():
    from localkit.cli import COMMANDS, new_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    out = {"localkit": parser, "tour": subs["tour"], "bench": subs["bench"]}
    for name, (module, _) in COMMANDS.items():
        p = new_parser(prog=f"localkit {name}")
        importlib.import_module(module).add_arguments(p)
        out[name] = p
    return out


def test_every_help_is_plain_text_describes_every_option_and_shows_defaults():
    for name, parser in _parsers().items():
        text = " ".join(parser.format_help().split())  # lines joined: a default may wrap
        assert "``" not in text and ":class:" not in text, name
        for action in parser._actions:
            if action.option_strings and action.help is not argparse.SUPPRESS:
                assert action.help, f"localkit {name} {action.option_strings[0]} has no help"
                if action.default not in (None, False, argparse.SUPPRESS):
                    assert f"default: {action.default}" in text or "default:" in action.help, \
                        (name, action.option_strings)


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"localkit {localkit.__version__}"


def test_train_lm_too_few_files_names_the_option_not_an_internal_setting(capsys):
    from localkit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train-lm", "--max-files", "3", "--steps", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--max-files 3: at least 10 files" in err and "val_every" not in err
