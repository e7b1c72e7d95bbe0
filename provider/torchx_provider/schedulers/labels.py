"""The conventions every backend shares: labels, annotations, the rank-0 variable, selectors.

Kubernetes objects and Docker containers carry the same keys, so that ``describe``, ``list``
and reattach work the same way everywhere:

* TorchX's ``torchx.pytorch.org/*`` keys (app name, role name, role index, replica id,
  version), which existing TorchX tooling already selects on;
* ``app.kubernetes.io/*`` recommended labels;
* Airflow's task-instance keys, used to find a still-running job of a retried task instead of
  submitting a second one. Label values are limited to 63 characters from a small alphabet,
  so long or unusual values (run ids such as ``manual__2024-05-01T10:00:00+00:00``) are
  stored in labels as a readable prefix plus a hash, and in full in annotations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.specs.api import Role
from torchx_provider.specs.names import short_hash
from torchx_provider.specs.serialization import role_to_dict
from torchx_provider.version import __version__

LABEL_VERSION = "torchx.pytorch.org/version"
LABEL_APP_NAME = "torchx.pytorch.org/app-name"
LABEL_ROLE_INDEX = "torchx.pytorch.org/role-index"
LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"
LABEL_REPLICA_ID = "torchx.pytorch.org/replica-id"
#: The provider's own marker: everything we create has it (``list`` selects on it).
LABEL_APP_ID = "torchx.pytorch.org/app-id"

LABEL_KUBE_APP_NAME = "app.kubernetes.io/name"
LABEL_KUBE_INSTANCE = "app.kubernetes.io/instance"
LABEL_KUBE_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_KUBE_COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "airflow-provider-torchx"
#: Selects everything this provider created (Kubernetes label selector / Docker label filter).
MANAGED_SELECTOR = f"{LABEL_KUBE_MANAGED_BY}={MANAGED_BY}"

#: The variable every replica gets with the hostname of role 0 / replica 0; the
#: ``${rank0_env}`` macro names it (on Volcano, every replica but rank 0 gets Volcano's own
#: ``VC_<TASK>_HOSTS`` there instead).
RANK0_HOST_ENV = "TORCHX_RANK0_HOST"

LABEL_DAG_ID = "airflow.apache.org/dag-id"
LABEL_TASK_ID = "airflow.apache.org/task-id"
LABEL_RUN_ID = "airflow.apache.org/run-id"
LABEL_MAP_INDEX = "airflow.apache.org/map-index"
LABEL_TRY_NUMBER = "airflow.apache.org/try-number"

#: Annotation (a label on Docker) holding the role a replica was created from, as
#: :func:`stored_role_json` writes it.
ANNOTATION_ROLE = "torchx.pytorch.org/role"
#: What :data:`ANNOTATION_ROLE` leaves out of the role. ``env``: its values are often secrets
#: (tokens, passwords), and a label or annotation is copied into listings, events and
#: monitoring systems, while the replica's own environment stays where access to the
#: container or pod governs it. ``metadata``: backend settings (a pod overlay, which may hold
#: environment values of its own), already applied to the objects themselves. Describing the
#: app needs neither: it reads the role's name, replica count, image and command back.
STORED_ROLE_OMITS = frozenset({"env", "metadata"})

_T = TypeVar("_T")

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def is_label_value(value: str) -> bool:
    """Whether Kubernetes accepts ``value`` as a label value: at most 63 characters of
    a-z, A-Z, 0-9, ``-``, ``_``, ``.``, starting and ending alphanumeric (or empty).

    >>> is_label_value("my_dag"), is_label_value("-x"), is_label_value("a" * 64)
    (True, False, False)
    """
    return _LABEL_VALUE.fullmatch(value) is not None


def label_value(value: str) -> str:
    """``value`` as a valid label value: unchanged if it is one, else a prefix plus a hash.

    >>> label_value("my_dag")
    'my_dag'
    >>> label_value("manual__2024-05-01T10:00:00+00:00")
    'manual__2024-05-01T10_00_00_00_00-c1e7a6'
    """
    if is_label_value(value):
        return value
    suffix = short_hash(value)
    cleaned = _BAD.sub("_", value)[: 63 - len(suffix) - 1]
    cleaned = cleaned.strip("-_.")
    return f"{cleaned}-{suffix}" if cleaned else suffix


@dataclass(frozen=True)
class TaskInstanceKey:
    """Which Airflow task instance (and which try) submitted a job."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1

    def labels(self, with_try: bool = True) -> dict[str, str]:
        """Label form (values shortened/hashed as needed); ``with_try`` adds the try number."""
        out = {
            LABEL_DAG_ID: label_value(self.dag_id),
            LABEL_TASK_ID: label_value(self.task_id),
            LABEL_RUN_ID: label_value(self.run_id),
            # -1 (an unmapped task) is not a valid label value: it must start alphanumeric.
            LABEL_MAP_INDEX: label_value(str(self.map_index)),
        }
        if with_try:
            out[LABEL_TRY_NUMBER] = str(self.try_number)
        return out

    def annotations(self) -> dict[str, str]:
        """Annotation form: the full values."""
        return {
            LABEL_DAG_ID: self.dag_id,
            LABEL_TASK_ID: self.task_id,
            LABEL_RUN_ID: self.run_id,
            LABEL_MAP_INDEX: str(self.map_index),
            LABEL_TRY_NUMBER: str(self.try_number),
        }

    def selector(self) -> str:
        """A label selector matching every try of this task instance."""
        return ",".join(f"{k}={v}" for k, v in self.labels(with_try=False).items())

    def same_instance(self, other: TaskInstanceKey | None) -> bool:
        """Whether ``other`` is a try of the same task instance (dag, task, run, map index).

        Labels may be hashed, so a selector can match more than one instance: whoever lists
        by :meth:`selector` confirms each hit with this, on the full values.
        """
        return other is not None and (
            other.dag_id,
            other.task_id,
            other.run_id,
            other.map_index,
        ) == (self.dag_id, self.task_id, self.run_id, self.map_index)

    def to_dict(self) -> dict[str, str | int]:
        """JSON-safe form (trigger kwargs, XCom); :meth:`from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TaskInstanceKey:
        """From :meth:`to_dict` (``try_number`` and ``map_index`` may be missing)."""
        return cls(
            dag_id=str(data["dag_id"]),
            task_id=str(data["task_id"]),
            run_id=str(data["run_id"]),
            map_index=int(str(data.get("map_index", -1))),
            try_number=int(str(data.get("try_number", 1))),
        )

    @classmethod
    def from_annotations(cls, annotations: Mapping[str, str]) -> TaskInstanceKey | None:
        """Read the key back from annotations (``None`` if the object has none)."""
        if LABEL_DAG_ID not in annotations:
            return None
        return cls(
            dag_id=annotations[LABEL_DAG_ID],
            task_id=annotations.get(LABEL_TASK_ID, ""),
            run_id=annotations.get(LABEL_RUN_ID, ""),
            map_index=int(annotations.get(LABEL_MAP_INDEX, "-1")),
            try_number=int(annotations.get(LABEL_TRY_NUMBER, "1")),
        )


def object_labels(app_name: str, app_id: str) -> dict[str, str]:
    """Labels for an app-level object (a Volcano Job, an AppWrapper)."""
    return {
        LABEL_VERSION: label_value(__version__),
        LABEL_APP_NAME: label_value(app_name),
        LABEL_APP_ID: label_value(app_id),
        LABEL_KUBE_APP_NAME: label_value(app_name),
        LABEL_KUBE_INSTANCE: label_value(app_id),
        LABEL_KUBE_MANAGED_BY: MANAGED_BY,
    }


def replica_labels(
    app_name: str, app_id: str, role_name: str, role_index: int, replica_id: int
) -> dict[str, str]:
    """Labels for one replica (a pod, a container)."""
    return {
        **object_labels(app_name, app_id),
        LABEL_ROLE_NAME: label_value(role_name),
        LABEL_ROLE_INDEX: str(role_index),
        LABEL_REPLICA_ID: str(replica_id),
        LABEL_KUBE_COMPONENT: label_value(role_name),
    }


_LABEL_KEY = re.compile(
    r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def check_labels(labels: Mapping[str, str], option: str = "labels") -> None:
    """Raise :class:`InvalidOptionError` for a label key or value Kubernetes would reject."""
    for key, value in labels.items():
        if not _LABEL_KEY.match(key) or len(key.rpartition("/")[0]) > 253:
            raise InvalidOptionError(
                f"{option}: {key!r} is not a valid label key ([prefix/]name, name at most 63 "
                "characters of a-z, 0-9, '-', '_', '.')",
                option,
            )
        if not is_label_value(value):
            raise InvalidOptionError(
                f"{option}: the value {value!r} of {key!r} is not a valid label value (at most "
                "63 characters of a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric)",
                option,
            )


def stored_role_json(role: Role) -> str:
    """The role as compact JSON for :data:`ANNOTATION_ROLE`: ``role_to_dict`` without
    :data:`STORED_ROLE_OMITS` (``role_from_dict`` reads it back with an empty env and
    metadata). One function for every backend, so none stores more than the others.

    >>> from torchx_provider.specs.api import Role
    >>> stored_role_json(Role("r", image="i", entrypoint="e", env={"TOKEN": "s3cret"}))[:60]
    '{"args":[],"entrypoint":"e","image":"i","max_retries":0,"min'
    >>> "s3cret" in stored_role_json(Role("r", env={"TOKEN": "s3cret"}))
    False
    """
    data = {k: v for k, v in role_to_dict(role).items() if k not in STORED_ROLE_OMITS}
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def stored_json(raw: str | None, parse: Callable[[Any], _T]) -> _T | None:
    """``parse`` of the JSON a label or annotation holds (the role, the task instance); ``None``
    when it is missing or unreadable -- an object made by another version, or edited by hand,
    is still described, only without what it no longer tells.

    >>> stored_json('{"a": 1}', dict), stored_json("{oops", dict), stored_json(None, dict)
    ({'a': 1}, None, None)
    """
    if not raw:
        return None
    try:
        return parse(json.loads(raw))
    except (ValueError, TypeError, AttributeError):
        return None
