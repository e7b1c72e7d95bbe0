"""What the browser tiers of the "TorchX app" view share: a real deployment with the view's
plugin, the view opened on a task instance, and screenshots kept under ``.ci-logs/browser/``
(CI keeps them as artifacts)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torchx_airflow_helpers import airflow_bin
from torchx_deployment import Deployment

from torchx_provider.plugins.app_view import BUNDLE

#: where the screenshots go: ``.ci-logs/browser/``, or a folder of its own under it for the
#: other Airflow versions' runs (``TORCHX_OTHER_VERSION``, set by scripts/other_versions.sh)
SHOTS = Path(__file__).resolve().parents[2] / ".ci-logs" / "browser"
if os.environ.get("TORCHX_OTHER_VERSION"):
    SHOTS = SHOTS / f"airflow-{os.environ['TORCHX_OTHER_VERSION']}"
PLUGIN = "torchx_provider.plugins.app_view:TorchXAppViewPlugin"


def plugin_entry_point(where: Path) -> str | None:
    """A directory that declares the view's ``airflow.plugins`` entry point, for an
    installation made before it existed (an editable install of an earlier checkout);
    ``None`` when the installed package declares it."""
    from importlib.metadata import entry_points

    if any(ep.value == PLUGIN for ep in entry_points(group="airflow.plugins")):
        return None
    info = where / "torchx_app_view_entry_point-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchx-app-view-entry-point\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(f"[airflow.plugins]\ntorchx_app_view = {PLUGIN}\n")
    return str(where)


@contextmanager
def view_deployment(
    prefix: str,
    dags: str,
    skip_or_fail: Callable[[str], Any],
    env: dict[str, str] | None = None,
) -> Iterator[Deployment]:
    """A started deployment whose DAG folder holds ``dags``, with the view's plugin and
    ``env`` for every component; stopped (and its home removed) after."""
    if not BUNDLE.is_file():
        skip_or_fail("the view's bundle is not built (cd ui && npm ci && npm run build)")
    home = Path(tempfile.mkdtemp(prefix=prefix))
    dep = Deployment(home, airflow_bin())
    dep.env.update(env or {})
    extra = plugin_entry_point(home / "entry-point")
    if extra is not None:
        dep.env["PYTHONPATH"] = os.pathsep.join(p for p in (dep.env.get("PYTHONPATH"), extra) if p)
    (home / "dags" / "torchx_view.py").write_text(dags)
    try:
        dep.start_all()
        yield dep
    finally:
        dep.stop_all()
        if not os.environ.get("TORCHX_KEEP_DEPLOYMENT"):
            shutil.rmtree(home, ignore_errors=True)


def remove_runs_containers(client: Any, dep: Deployment) -> None:
    """Remove the containers of the runs ``dep`` triggered, and no other's: another Airflow
    version's deployment may run the same DAGs at the same time (CI runs two at once)."""
    from torchx_airflow_helpers import remove_containers

    from torchx_provider.schedulers.labels import LABEL_DAG_ID, LABEL_RUN_ID, label_value

    for dag_id, run_id in dep.triggered:
        labels = [f"{LABEL_DAG_ID}={dag_id}", f"{LABEL_RUN_ID}={label_value(run_id)}"]
        found = client.containers.list(all=True, filters={"label": labels})
        remove_containers(found, f" of {dag_id} {run_id}")


def open_view(
    browser: Any, dep: Deployment, dag_id: str, run_id: str, *, dark: bool = False
) -> Any:
    """A page on the view of ``dag_id``'s task ``train`` in ``run_id``."""
    context = browser.new_context(
        viewport={"width": 1400, "height": 1000}, color_scheme="dark" if dark else "light"
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    if dep.token:
        # an Airflow that wants a token even when every user is an admin (before 3.3): log
        # in first (its login lands on the home page, not on the page asked for)
        goto(page, f"{dep.base}/auth/token/login")
    goto(page, f"{dep.base}/dags/{dag_id}/runs/{run_id}/tasks/train/plugin/torchx_app")
    reload_a_missed_tab(page)
    return page


def reload_a_missed_tab(page: Any, attempts: int = 3) -> None:
    """Load the page again while Airflow's UI shows its "Page Not Found" in the task's tab
    instead of the view: opened by its URL on a busy API server, the UI may match the tab's
    route before it has the list of plugins' tabs, and does not match it again once it has
    them (its tab bar then shows "TorchX app" above the 404); a user reloads. Returns once
    the view (or its own error or loading line) or the 404 shows, or after 60 s (the test's
    own wait then says what the page showed)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    view = page.get_by_test_id("torchx-app-view")
    settled = (
        view.or_(page.get_by_test_id("torchx-app-error"))
        .or_(page.get_by_text("Loading the TorchX app"))
        .or_(page.get_by_text("Page Not Found"))
    )
    for attempt in range(attempts):
        try:
            settled.first.wait_for(timeout=60_000)
        except PlaywrightTimeout:
            return
        if not page.get_by_text("Page Not Found").count() or attempt == attempts - 1:
            return
        goto(page, page.url)


#: how Playwright reports a navigation chromium dropped when the machine's network changed:
#: the network error itself, or (when chromium showed its error page first) the navigation
#: to that page
NETWORK_CHANGED = ("ERR_NETWORK_CHANGED", 'interrupted by another navigation to "chrome-error://')


def goto(page: Any, url: str, attempts: int = 3) -> None:
    """``page.goto(url)``, again when chromium dropped it as ``ERR_NETWORK_CHANGED``: it
    aborts a navigation under way when the machine's network interfaces change, which the
    tiers beside the browser's do (a Docker network made or removed, a pod's veth on the real
    node), as a user's browser does when Wi-Fi changes; the user loads again. Playwright
    says so in one of two ways (:data:`NETWORK_CHANGED`); the second, which hides the error
    under chromium's error page, was seen once on Airflow 3.1.8 with other tiers beside it.
    A server that is down fails every attempt."""
    for attempt in range(attempts):
        try:
            page.goto(url)
            return
        except Exception as e:
            if not any(s in str(e) for s in NETWORK_CHANGED) or attempt == attempts - 1:
                raise
            page.wait_for_timeout(500)


def shown(
    page: Any, locator: Any, dep: Deployment, dag_id: str, run_id: str, timeout: float = 60_000
) -> None:
    """Wait for ``locator`` on the view of ``dag_id``'s task ``train`` in ``run_id``; when it
    does not come, fail with what the view showed instead, what its API answered and the
    task's story (its state and the last records of its log)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        locator.wait_for(timeout=timeout)
        return
    except PlaywrightTimeout:
        pass
    try:
        text = page.locator("body").inner_text(timeout=5_000)[-3000:]
    except PlaywrightTimeout:
        text = "(the page did not answer)"
    try:
        answer = json.dumps(dep.get(f"/torchx/app/{dag_id}/{run_id}/train?map_index=-1"))[:4000]
    except Exception as e:  # the API server itself may be what is wrong
        answer = f"(not read: {e})"
    shot(page, f"timed-out-{dag_id}")
    raise AssertionError(
        f"{locator} not shown after {timeout / 1000:.0f} s\nthe view showed:\n{text}\n"
        f"its API answered:\n{answer}\n{dep.task_story(dag_id, run_id, 'train', last=40)}"
    )


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"app-view-{name}.png"), full_page=True)
