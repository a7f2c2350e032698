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


class HelpFormatter(argparse.HelpFormatter):
    """Help as plain text, each option's default shown (unless its help already says it)."""

    def _get_help_string(self, action):
        text = _plain(action.help or "")
        shown = action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
        if shown and "default" not in text and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _plain(text):
    """reStructuredText markup out of a help text: ``code`` -> code, :role:`x` -> x."""
    text = re.sub(r":[a-z:]+:`~?([^`]*)`", r"\1", text)
    return text.replace("``", "")


def new_parser(**kwargs):
    """An :class:`argparse.ArgumentParser` with localkit's help formatting."""
    return argparse.ArgumentParser(formatter_class=HelpFormatter, **kwargs)


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
        raise UsageError(f"--only: unknown tour section(s) {', '.join(unknown)}; the sections are: "
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
        raise UsageError(f"--dir {directory}: no benchmark scripts (bench_*.py) in {str(directory.resolve())!r}. The benchmarks are "
                         "part of localkit's source checkout, not of the installed package: run 'localkit bench' "
                         "from the repository root, or pass --dir path/to/localkit/benchmarks (their peers come "
                         f"with {install_extra('bench')})")
    names = [f.stem[len("bench_"):] for f in files]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise UsageError(f"--only: unknown benchmark(s) {', '.join(unknown)}; the benchmarks in {str(directory)!r} are: "
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
    parser = new_parser(prog=f"localkit {command}", description=_plain((mod.__doc__ or "").strip().splitlines()[0]))
    mod.add_arguments(parser)
    return mod.main(parser.parse_args(argv))


def _sections():
    """The tour's section names, listed without importing the tour (nor scikit-learn)."""
    import pkgutil

    where = importlib.util.find_spec("localkit.tour").submodule_search_locations
    return sorted(m.name for m in pkgutil.iter_modules(where) if not m.name.startswith("_"))


def build_parser():
    parser = new_parser(prog="localkit", description="localkit's command line: the tour of every method against "
                        "its reference, the benchmarks, and the language-model trainer. 'localkit COMMAND --help' "
                        "describes a command's options.")
    parser.add_argument("--version", action="version", version=f"localkit {__version__}",
                        help="print localkit's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    tour_help = "reproduce every method of the map against its reference, with timings and figures"
    p = sub.add_parser("tour", help=tour_help, description=tour_help, formatter_class=HelpFormatter)
    p.add_argument("--out", default="tour_output", help="folder for the figures (made if missing)")
    p.add_argument("--only", nargs="+", metavar="SECTION",
                   help=f"run only these sections (default: all; the sections are {', '.join(_sections())})")
    p.set_defaults(func=_tour, parser=p)
    bench_help = "run the benchmarks side by side with their peers and rewrite RESULTS.md"
    p = sub.add_parser("bench", help=bench_help, description=bench_help, formatter_class=HelpFormatter)
    p.add_argument("--dir", default="benchmarks", help="folder holding bench_*.py and RESULTS.md (a source checkout's)")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="run only these benchmarks, bench_NAME.py (default: all)")
    p.add_argument("--quick", action="store_true", help="small sizes, print only, RESULTS.md untouched")
    p.set_defaults(func=_bench, parser=p)
    for name, (module, help_) in COMMANDS.items():  # listed for --help; main() hands them over
        sub.add_parser(name, help=f"{help_}; 'localkit {name} --help' for its options")
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
