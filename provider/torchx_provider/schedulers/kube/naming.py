"""Names of what the Kubernetes backends create, and of what controllers derive from them.

Every name goes through :func:`~torchx_provider.specs.names.normalize_rfc1123_name` (the one
name function); this module only decides how much of the 63 characters each part may use:

* the job / AppWrapper name: ``{app}-{8 random}``, the app part at most
  :data:`APP_NAME_BUDGET` characters;
* one slug per role, unique within the app, short enough that the longest name derived from
  it fits: Volcano names pods ``{job}-{task}-{index}`` with ``task = {role}-{replica}``; MCAD
  pods are named ``{job}-{role}-{replica}`` by us. A pod's name is also its hostname, an RFC
  1123 label, so it must fit in 63 characters too.

>>> job_name("Trainer_v2", "k3x9q2ab")
'trainer-v2-k3x9q2ab'
>>> role_slugs(["my-role", "My_Role"], [20, 20])
['my-role-5e2280', 'my-role-fc6b0a']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.names import MAX_NAME_LEN, normalize_rfc1123_name, short_hash

if TYPE_CHECKING:
    from torchx_provider.specs.api import AppDef

#: How many characters of the app's name the job name keeps (more are cut, with a hash).
APP_NAME_BUDGET = 20
#: Length of the random part of a job name.
SUFFIX_LEN = 8
#: The shortest role slug we accept; below it a name would be mostly hash.
MIN_ROLE_BUDGET = 8


def job_name(app_name: str, suffix: str) -> str:
    """The object name of an app: its normalized name (at most 20 chars) and ``suffix``."""
    return f"{normalize_rfc1123_name(app_name, APP_NAME_BUDGET)}-{suffix}"


def role_budget(job: str, num_replicas: int, overhead: int) -> int:
    """How long a role slug may be so that ``{job}-{slug}-{replica}`` plus ``overhead`` more
    characters stays within 63 (``overhead`` is 2 for Volcano's ``-{index}`` suffix)."""
    digits = len(str(max(num_replicas - 1, 0)))
    return MAX_NAME_LEN - len(job) - 1 - 1 - digits - overhead


def role_slugs(names: Sequence[str], budgets: Sequence[int]) -> list[str]:
    """One RFC 1123 slug per role name, each within its budget and all distinct.

    Names that normalize to the same slug (``my-role`` and ``My_Role``) each get a hash of
    their original name appended, so the slug of a role never depends on the other roles
    unless they collide.
    """
    for name, budget in zip(names, budgets, strict=True):
        if budget < MIN_ROLE_BUDGET:
            raise InvalidAppError(
                f"role {name!r}: too many replicas for the 63-character names Kubernetes "
                "allows; shorten the app name or use fewer replicas",
                "roles",
            )
    slugs = [normalize_rfc1123_name(n, b) for n, b in zip(names, budgets, strict=True)]
    counts = Counter(slugs)
    out: list[str] = []
    for name, budget, slug in zip(names, budgets, slugs, strict=True):
        if counts[slug] > 1:
            suffix = short_hash(name)
            head = slug[: budget - len(suffix) - 1].rstrip("-") or "r"
            slug = f"{head}-{suffix}"
        out.append(slug)
    if len(set(out)) != len(out):  # only if two role names hash alike: say so, never clash
        raise InvalidAppError(
            f"role names {list(names)} map to the same Kubernetes names {out}; rename a role",
            "roles",
        )
    return out


def volcano_task_name(role_slug: str, replica_id: int) -> str:
    """The Volcano task of one replica: ``{role}-{replica}`` (one task per replica)."""
    return f"{role_slug}-{replica_id}"


def volcano_pod_name(job: str, task: str, index: int = 0) -> str:
    """The pod name Volcano's controller derives (``jobhelpers.MakePodName``)."""
    return f"{job}-{task}-{index}"


def volcano_hosts_env(task: str) -> str:
    """The variable Volcano's ``svc`` plugin sets to the hostnames of ``task``'s pods:
    ``VC_<TASK>_HOSTS``, the task name upper-cased with ``-`` turned into ``_``.

    >>> volcano_hosts_env("my-role-0")
    'VC_MY_ROLE_0_HOSTS'
    """
    return f"VC_{task.replace('-', '_').upper()}_HOSTS"


def mcad_pod_name(job: str, role_slug: str, replica_id: int) -> str:
    """The name (and hostname) of one MCAD replica pod: unique across roles."""
    return f"{job}-{role_slug}-{replica_id}"


@dataclass(frozen=True)
class AppNames:
    """The object name (job or AppWrapper, and its Service) and one slug per role (its
    container name and the stem of its pods' names)."""

    name: str
    slugs: list[str]

    @classmethod
    def of(cls, app: AppDef, suffix: str, overhead: int) -> AppNames:
        """The names of ``app``; ``overhead`` is what a backend's pod names add to each slug
        beyond ``{name}-{slug}-{replica}`` (Volcano's task index: 2, MCAD: 0)."""
        name = job_name(app.name, suffix)
        budgets = [role_budget(name, r.num_replicas, overhead) for r in app.roles]
        return cls(name, role_slugs([r.name for r in app.roles], budgets))


@dataclass(frozen=True)
class Placement:
    """Where an app's object is created and what identifies it: its namespace, its
    :class:`AppNames`, and the Airflow task instance submitting it (``None``: none)."""

    namespace: str
    names: AppNames
    ti_key: TaskInstanceKey | None = None
