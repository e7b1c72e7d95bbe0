"""Label values and the label/annotation sets every backend puts on what it creates."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torchx_provider.schedulers import labels
from torchx_provider.schedulers.labels import TaskInstanceKey, label_value
from torchx_provider.specs.names import short_hash

# Kubernetes' rule for label values, matched against the whole string.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
PROPS = settings(max_examples=100, deadline=None)


def _is_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


@pytest.mark.parametrize("value", ["", "a", "my_dag", "v1.2-rc.3", "A" * 63, "0"])
def test_valid_values_are_unchanged(value: str) -> None:
    assert label_value(value) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("manual__2024-05-01T10:00:00+00:00", "manual__2024-05-01T10_00_00_00_00-c1e7a6"),
        ("-lead", f"lead-{short_hash('-lead')}"),
        ("___", short_hash("___")),
        ("a" * 64, "a" * 56 + "-" + short_hash("a" * 64)),
    ],
)
def test_invalid_values_get_a_prefix_and_a_hash(value: str, expected: str) -> None:
    assert label_value(value) == expected
    assert _is_label_value(label_value(value))


def test_trailing_newline_is_not_a_valid_label_value() -> None:
    assert _is_label_value(label_value("abc\n"))


@PROPS
@given(st.text(max_size=100))
def test_label_value_is_always_valid(value: str) -> None:
    out = label_value(value)
    assert _is_label_value(out), out
    assert label_value(value) == out  # stable
    assert label_value(out) == out  # a valid value stays as it is


@PROPS
@given(st.text(min_size=63, max_size=100), st.text(max_size=10), st.text(max_size=10))
def test_long_values_sharing_a_prefix_stay_distinct(prefix: str, a: str, b: str) -> None:
    assume(a != b)
    assert label_value(prefix + a) != label_value(prefix + b)


@PROPS
@given(st.from_regex(LABEL_VALUE, fullmatch=True).filter(lambda v: len(v) <= 63))
def test_every_valid_value_is_kept(value: str) -> None:
    assert label_value(value) == value


# -- label sets --------------------------------------------------------------------------------


def test_task_instance_key_labels_annotations_and_selector() -> None:
    key = TaskInstanceKey("my_dag", "train", "manual__2024-05-01T10:00:00+00:00", 3, 2)
    assert key.labels() == {
        labels.LABEL_DAG_ID: "my_dag",
        labels.LABEL_TASK_ID: "train",
        labels.LABEL_RUN_ID: label_value(key.run_id),
        labels.LABEL_MAP_INDEX: "3",
        labels.LABEL_TRY_NUMBER: "2",
    }
    assert labels.LABEL_TRY_NUMBER not in key.labels(with_try=False)
    assert key.annotations()[labels.LABEL_RUN_ID] == key.run_id
    selector = key.selector()
    assert "try-number" not in selector
    assert f"{labels.LABEL_DAG_ID}=my_dag" in selector.split(",")
    assert TaskInstanceKey.from_annotations(key.annotations()) == key
    assert TaskInstanceKey.from_annotations({}) is None


def test_object_and_replica_labels_are_valid_values() -> None:
    obj = labels.object_labels("My App!", "default:my-app-x1")
    assert obj[labels.LABEL_KUBE_MANAGED_BY] == labels.MANAGED_BY
    replica = labels.replica_labels("My App!", "default:my-app-x1", "trainer", 1, 7)
    assert replica[labels.LABEL_REPLICA_ID] == "7"
    assert replica[labels.LABEL_ROLE_INDEX] == "1"
    assert replica[labels.LABEL_ROLE_NAME] == "trainer"
    assert obj.items() <= replica.items()
    for value in replica.values():
        assert _is_label_value(value), value
