"""Regenerate the parts of the documentation pages that come from the code, so they cannot
drift.

Each generated part sits between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->`` in the page :data:`GENERATORS` names. Run
``.venv/bin/python scripts/update_docs.py`` after changing a backend's run options, a built-in
component or the RBAC role (rbac.md and the Kubernetes quickstart show it); ``--check`` exits
1 when a page is stale (a unit test runs it). The tables measured by CI (reliability,
permissions) have scripts of their own (``scripts/reliability_table.py``,
``scripts/permission_table.py``).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
#: The RBAC the integration tests run under (least privilege): what the docs show.
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
        parts.append(f"### `{backend.name}` — {title}\n\n{options.to_markdown()}\n")
    return "\n".join(parts)


def rbac() -> str:
    """The namespaced Role the Kubernetes backends need: the one the integration tests prove
    sufficient (they run as a ServiceAccount bound to nothing else)."""
    return f"```yaml\n{_documented_role()}\n```\n"


#: the namespace of the Kubernetes quickstart (docs/kubernetes-quickstart.md)
QUICKSTART_NAMESPACE = "torchx-quickstart"


def quickstart_role() -> str:
    """The same Role for the quickstart's namespace (its other objects are on the page)."""
    documented = _documented_role()
    role = documented.replace("namespace: torchx-test\n", f"namespace: {QUICKSTART_NAMESPACE}\n")
    if role == documented:
        raise SystemExit(f"{RBAC}'s Role is no longer in the namespace torchx-test")
    return f"```yaml\n{role}\n```\n"


def _documented_role() -> str:
    """The first Role of :data:`RBAC` (the test namespace's), as written there."""
    docs = RBAC.read_text().split("\n---\n")
    role = next(d for d in docs if re.search(r"^kind: Role$", d, re.M))
    return role.strip()


def components() -> str:
    """The built-in components: name, arguments with their defaults, and the first line of
    each one's documentation."""
    from torchx_provider.components import get_component, list_components

    rows = ["| component | arguments | what it runs |", "|---|---|---|"]
    for name in list_components():
        fn = get_component(name)
        signature = inspect.signature(fn)
        args = ", ".join(_argument(p) for p in signature.parameters.values())
        summary = (inspect.getdoc(fn) or "").split("\n\n", 1)[0].replace("\n", " ")
        summary = re.sub(r":\w+:`([^`]+)`", r"`\1`", summary).replace("``", "`")
        cells = (f"`{name}`", f"`{args}`", summary)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _argument(param: inspect.Parameter) -> str:
    """``name``, ``*name`` or ``name=default`` (the default as Python writes it)."""
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return f"*{param.name}"
    if param.default is inspect.Parameter.empty:
        return param.name
    return f"{param.name}={param.default!r}"


#: generated part -> (the page that holds it, its generator)
GENERATORS: dict[str, tuple[str, Callable[[], str]]] = {
    "run-options": ("backends.md", run_options),
    "rbac": ("rbac.md", rbac),
    "quickstart-role": ("kubernetes-quickstart.md", quickstart_role),
    "components": ("concepts.md", components),
}


def render(page: str, text: str) -> str:
    """``text`` (of docs page ``page``) with its generated parts replaced by what the code
    says now."""
    for name, (where, generate) in GENERATORS.items():
        if where != page:
            continue
        start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"docs/{page} lacks the markers {start} ... {end}")
        block = f"{start}\n{generate()}{end}"
        text = pattern.sub(lambda _m, block=block: block, text)
    return text


def pages() -> list[str]:
    """The pages that hold generated parts, in a stable order."""
    return sorted({where for where, _ in GENERATORS.values()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args()
    stale = []
    for page in pages():
        path = DOCS / page
        current = path.read_text()
        fresh = render(page, current)
        if fresh == current:
            continue
        if args.check:
            stale.append(f"docs/{page}")
        else:
            path.write_text(fresh)
    if stale:
        print(f"{', '.join(stale)} stale: run scripts/update_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
