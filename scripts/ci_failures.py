"""What CI prints last when tests failed: the first failed tests with the first lines of their
messages (pytest's JUnit files: the test command's, .ci-logs/test/*.xml, then the other
versions'). pytest's one-line summary cuts a message at its first line, where a test that
timed out waiting on a task keeps the task's story (its state, the deployment's processes,
each attempt's last log records). Each pytest's log is its JUnit file's name with ``.log``.

    python scripts/ci_failures.py .ci-logs/test/*.xml [--lines N] [--tests N]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

#: characters of a message line shown (a log record may be long)
WIDTH = 300


def failures(junit: Path) -> Iterator[tuple[str, str]]:
    """(test id, message) of each failed or erroring test case of one JUnit file."""
    try:
        root = ET.parse(junit).getroot()
    except (ET.ParseError, OSError) as e:
        yield str(junit), f"(its JUnit file cannot be read: {e})"
        return
    for case in root.iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            message = found.get("message") or (found.text or "")
            yield test, message


def report(files: list[Path], lines: int, tests: int) -> list[str]:
    """The lines printed for ``files``: for the first ``tests`` failed tests, the log of the
    pytest that ran it, its id and its message's first ``lines`` lines, each cut at ``WIDTH``
    characters; how many more failed."""
    out: list[str] = []
    found = [(junit, test, message) for junit in files for test, message in failures(junit)]
    for junit, test, message in found[:tests]:
        out.append(f"--- {junit.with_suffix('.log')}: {test}")
        every = message.splitlines()
        out += [f"  {line[:WIDTH]}" for line in every[:lines]]
        left = len(every) - lines
        if left > 0:
            out.append(f"  ({left} more lines in that log)")
    if len(found) > tests:
        out.append(f"--- and {len(found) - tests} more failed (listed above)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="*", type=Path)
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--tests", type=int, default=3)
    args = parser.parse_args(argv)
    print("\n".join(report([p for p in args.junit if p.is_file()], args.lines, args.tests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
