"""Command line: ``localkit tour`` and ``localkit bench`` (also ``python -m localkit``).

Other sub-commands register themselves in :data:`COMMANDS` from their own modules (e.g.
``localkit train-lm`` from :mod:`localkit.nn.train_lm`), imported only when called.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import re
import sys
from pathlib import Path

from . import __version__
from ._extras import install_extra
from ._files import folder_lock, write_atomically

#: sub-command -> (module, help). The module defines ``add_arguments(parser)`` and ``main(args)``.
COMMANDS = {
    "train-lm": ("localkit.nn.train_lm", "train a character-level language model (needs torch)"),
}


class UsageError(Exception):
    """A bad command line: reported as ``localkit <command>: error: ...`` with exit status 2."""


def _tour(args):
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("the tour draws its figures with matplotlib, which is not installed: "
                         f"{install_extra('plot')}, or the 'tour' extra for the reference libraries too")
    from .tour import run_tour
    from .tour._core import section_names

    unknown = sorted(set(args.only or ()) - set(section_names()))
    if unknown:
        raise UsageError(f"unknown tour section(s) {', '.join(unknown)}; the sections are: "
                         f"{', '.join(section_names())}")
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file of that name, a read-only parent
        raise UsageError(f"--out {args.out}: cannot be a folder for the figures ({exc.strerror})") from None
    _, failures = run_tour(args.out, only=args.only or None)
    if failures:
        print(f"\n{len(failures)} tour item(s) failed: {', '.join(n for n, _ in failures)}", file=sys.stderr)
        return 1
    return 0


def bench_files(directory, only=None):
    """The benchmark scripts ``bench_<name>.py`` of ``directory`` (those named in ``only``, or all).

    The scripts belong to a source checkout, not to the installed package: an empty or missing
    directory, or a name that is not there, is a :class:`UsageError` that says what exists.
    """
    directory = Path(directory)
    files = sorted(directory.glob("bench_*.py"))
    if not files:
        raise UsageError(f"no benchmark scripts (bench_*.py) in {str(directory.resolve())!r}. The benchmarks are "
                         "part of localkit's source checkout, not of the installed package: run 'localkit bench' "
                         "from the repository root, or pass --dir path/to/localkit/benchmarks (their peers come "
                         "with pip install 'localkit[bench]')")
    names = [f.stem[len("bench_"):] for f in files]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise UsageError(f"unknown benchmark(s) {', '.join(unknown)}; the benchmarks in {str(directory)!r} are: "
                         f"{', '.join(names)}")
    return [f for f, name in zip(files, names) if not only or name in only]


def write_section(results, name, markdown, command):
    """Replace (or append) the section ``name`` of ``RESULTS.md``, keeping the others.

    Read, changed and written under an exclusive lock on its folder, and written atomically:
    benchmarks ending together (several ``localkit bench --only ...``) each keep their section
    (unlocked, 4-7 of 10 such runs lost one).
    """
    results = Path(results)
    stamp = datetime.date.today().isoformat()
    block = (f"<!-- begin {name} -->\n{markdown.strip()}\n\n"
             f"_Measured {stamp} with `{command}`._\n<!-- end {name} -->")
    pattern = re.compile(rf"<!-- begin {re.escape(name)} -->.*?<!-- end {re.escape(name)} -->", re.S)
    with folder_lock(results.parent):
        text = results.read_text() if results.exists() else "# Benchmark results\n\nEach section is rewritten by the command shown in it.\n"
        text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
        write_atomically(results, lambda f: f.write(text))


def _bench(args):
    files = bench_files(args.dir, args.only)
    from ._timing import machine_rates, rates_line

    # the limit that the benchmarks' pairs per second are read against
    print(rates_line(machine_rates(repeat=2 if args.quick else 5)), flush=True)
    for f in files:
        name = f.stem[len("bench_"):]
        spec = importlib.util.spec_from_file_location(f"localkit_bench_{name}", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        print(f"== {name}: {getattr(mod, 'TITLE', '')}", flush=True)
        markdown = mod.run(quick=args.quick)
        if markdown is None:  # nothing to measure on this machine (a GPU benchmark without CUDA)
            print(f"skipped on this machine; the {name} section of RESULTS.md is left as it was", flush=True)
            continue
        print(markdown, flush=True)
        if not args.quick:
            write_section(Path(args.dir) / "RESULTS.md", name, markdown, f"localkit bench --only {name}")
    return 0


def _delegate(command, argv):
    """Import a sub-command's module only when it is called (``train-lm`` imports torch)."""
    try:
        mod = importlib.import_module(COMMANDS[command][0])
    except ImportError as exc:
        print(f"localkit {command}: {exc}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog=f"localkit {command}")
    mod.add_arguments(parser)
    return mod.main(parser.parse_args(argv))


def build_parser():
    parser = argparse.ArgumentParser(prog="localkit", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"localkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("tour", help="reproduce every method of the map against its reference")
    p.add_argument("--out", default="tour_output", help="directory for the figures (default: tour_output)")
    p.add_argument("--only", nargs="+", help="section names to run (default: all)")
    p.set_defaults(func=_tour, parser=p)
    p = sub.add_parser("bench", help="run benchmarks side by side with their peers")
    p.add_argument("--dir", default="benchmarks", help="directory holding bench_*.py and RESULTS.md")
    p.add_argument("--only", nargs="+", help="benchmark names (bench_<name>.py) to run (default: all)")
    p.add_argument("--quick", action="store_true", help="small sizes, print only, RESULTS.md untouched")
    p.set_defaults(func=_bench, parser=p)
    for name, (module, help_) in COMMANDS.items():  # listed for --help; main() hands them over
        sub.add_parser(name, help=help_)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:  # its own parser, with all of its options
        return _delegate(argv[0], argv[1:]) or 0
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except UsageError as exc:  # as argparse reports a bad option: usage, "error: ...", exit status 2
        args.parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
