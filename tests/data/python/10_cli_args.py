import argparse
import os


def build_parser():
    parser = argparse.ArgumentParser(
        prog="tool",
        description="Process some files.",
    )
    parser.add_argument("paths", nargs="*", help="input files")
    parser.add_argument(
        "-v", "--verbose",
        action="store_true",
        help="print more output",  # shown in --help
    )
    parser.add_argument("--limit", type=int, default=10)
    return parser


def collect(paths, limit):
    found = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for f in files:
                    if len(found) >= limit:
                        return found
                    found.append(os.path.join(root, f))
        elif os.path.isfile(p):
            found.append(p)
    return found


def main(argv=None):
    args = build_parser().parse_args(argv)
    files = collect(args.paths or ["."], args.limit)
    if args.verbose:
        print(f"{len(files)} files")
    for name in files:
        print(name)


main(["--limit", "3"])
