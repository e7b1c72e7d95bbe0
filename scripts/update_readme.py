"""Regenerate the parts of README.md that come from the code, so they cannot drift.

Each generated part sits between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->``. Run ``.venv/bin/python scripts/update_readme.py`` after
changing a backend's run options or the RBAC role; ``--check`` exits 1 when README.md is stale
(a unit test runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
#: The RBAC the integration tests run under (least privilege): what the README documents.
RBAC = REPO / "tests" / "cluster" / "rbac.yaml"


def run_options() -> str:
    """One table of run options per built-in backend (the backend table's rows, in order),
    from each row's run-option dataclass."""
    from torchx_provider.backends import BUILTIN_BACKENDS

    parts = []
    for backend in BUILTIN_BACKENDS:
        options = backend.options_class().run_opts()
        operator = backend.operator.rpartition(":")[2]
        title = f"{backend.title} (`{operator}`)"
        parts.append(f"#### `{backend.name}` — {title}\n\n{options.to_markdown()}\n")
    return "\n".join(parts)


def rbac() -> str:
    """The namespaced Role the Kubernetes backends need: the one the integration tests prove
    sufficient (they run as a ServiceAccount bound to nothing else)."""
    docs = RBAC.read_text().split("\n---\n")
    role = next(d for d in docs if re.search(r"^kind: Role$", d, re.M))
    return f"```yaml\n{role.strip()}\n```\n"


GENERATORS: dict[str, Callable[[], str]] = {"run-options": run_options, "rbac": rbac}


def render(text: str) -> str:
    """``text`` with every generated part replaced by what the code says now."""
    for name, generate in GENERATORS.items():
        start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md lacks the markers {start} ... {end}")
        block = f"{start}\n{generate()}{end}"
        text = pattern.sub(lambda _m, block=block: block, text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    args = parser.parse_args()
    current = README.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md is stale: run scripts/update_readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
