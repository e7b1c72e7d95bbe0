"""Render the permission table of docs/rbac.md from the permission tier's results.

``tests/integration/kubernetes/test_permission_matrix.py`` runs what a task does as an
account without one permission of the documented Role, for each, and writes one record per
permission to ``.ci-logs/permissions/results.json``. This script puts them, in the Role's
order, between ``<!-- generated: permissions -->`` and ``<!-- end generated: permissions -->``
in docs/rbac.md; ``--check`` exits 1 when the page's table differs from the results.

    .venv/bin/python scripts/permission_table.py            # rewrite docs/rbac.md
    .venv/bin/python scripts/permission_table.py --check    # fail when it would change
"""

from __future__ import annotations

import sys
from typing import Any

from reliability_table import REPO, cli, replace_block

PAGE = REPO / "docs" / "rbac.md"
RESULTS = REPO / ".ci-logs" / "permissions" / "results.json"
START, END = "<!-- generated: permissions -->", "<!-- end generated: permissions -->"
COLUMNS = ("API group", "Resource", "Verb", "Measured with", "Without it", "Notes")
#: what a measurement on the local cluster cannot show, by row id
NOTES = {
    "batch.volcano.sh/jobs:watch": "changes are read every poll instead of watched",
    "workload.codeflare.dev/appwrappers:watch": "changes are read every poll instead of watched",
    "jobset.x-k8s.io/jobsets:watch": "changes are read every poll instead of watched",
    "core/pods:watch": "pod changes are read every poll instead of watched",
    "batch/jobs:create": "needed where the AppWrapper admission webhook runs (its "
    "userRBACAdmissionCheck: the submitter may create what is wrapped); the local cluster "
    "serves none",
    "core/services:create": "as batch jobs create (a Service is wrapped per app)",
    "scheduling.x-k8s.io/podgroups:create": "MCAD apps with gang scheduling wrap a PodGroup "
    "(the local MCAD server has no coscheduler)",
    "core/pods:list": "without it the job's state is followed, not its replicas' exit codes, "
    "hosts or logs",
    "core/pods/log:get": "without it the replicas' logs are not forwarded",
    "core/events:get": "not used: Events are listed and watched",
    "core/events:list": "without it why a Volcano job waits at its queue (its PodGroup's "
    "Events), or which of its pods Volcano cannot create (the job's Events), is not said; the "
    "task log says so once per namespace",
    "core/events:watch": "as events list (one watch per namespace, in the triggerer)",
    "kueue.x-k8s.io/workloads:get": "not used: Workloads are listed and watched",
    "kueue.x-k8s.io/workloads:list": "without it why an AppWrapper or a JobSet waits for "
    "Kueue's admission, and that Kueue preempted it, is not said (quietly: reasons from pods "
    "still are)",
    "kueue.x-k8s.io/workloads:watch": "as workloads list (one watch per namespace, in the "
    "triggerer)",
    "kueue.x-k8s.io/workloads:patch": "without it a cancel with cancel_by='suspend' of a job "
    "of a LocalQueue deletes it instead (Kueue would start a suspended one again); the task "
    "log says so, with the rule to add",
    "kueue.x-k8s.io/localqueues:get": "without it a LocalQueue that does not exist is not "
    "refused before submission (Kueue says so; the follow gives the job up after the start "
    "grace), and a worker that does not defer does not say how much waits in the LocalQueue",
    "kueue.x-k8s.io/localqueues:list": "without it a LocalQueue that does not exist is refused "
    "without naming those of the namespace, and the triggerer does not say how much waits in "
    "the LocalQueue of a job Kueue has not admitted (quietly: Kueue's reason still is)",
    "kueue.x-k8s.io/localqueues:watch": "as localqueues list (one watch per namespace, in the "
    "triggerer)",
}


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of ``rows``, in the Role's order."""
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in sorted(rows.values(), key=lambda r: int(r["order"])):
        cells = (
            f"`{r['group']}`" if r["group"] else "core",
            f"`{r['resource']}`",
            f"`{r['verb']}`",
            f"`{r['backend']}`",
            r["outcome"],
            NOTES.get(r["id"], ""),
        )
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    return cli(
        __doc__ or "",
        PAGE,
        RESULTS,
        lambda text, rows: replace_block(text, START, END, table(rows)),
        "permission table",
        "run scripts/permission_table.py and commit docs/rbac.md",
    )


if __name__ == "__main__":
    sys.exit(main())
