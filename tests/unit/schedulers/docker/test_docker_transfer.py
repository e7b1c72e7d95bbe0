"""An image pull or push in the task log: the engine's many events a second become a few
lines (what the engine says once, a summary every few seconds, one line at the end)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from torchx_provider.schedulers.docker.transfer import TRANSFER_INTERVAL, Transfer
from torchx_provider.schedulers.workspace import engine_progress

MB = 1_000_000


def pull_events(layers: int = 3, steps: int = 50) -> list[dict[str, Any]]:
    """What the engine streams for a pull of ``layers`` layers of 10 MB, one event per
    ``10 MB / steps`` moved, as a real pull does."""
    out: list[dict[str, Any]] = [{"status": "Pulling from team/app", "id": "1"}]
    ids = [f"layer{i}" for i in range(layers)]
    out += [{"status": "Pulling fs layer", "progressDetail": {}, "id": i} for i in ids]
    for i in ids:
        for n in range(1, steps + 1):
            detail = {"current": n * 10 * MB // steps, "total": 10 * MB}
            out.append({"status": "Downloading", "progressDetail": detail, "id": i})
        out += [
            {"status": "Verifying Checksum", "progressDetail": {}, "id": i},
            {"status": "Download complete", "progressDetail": {}, "id": i},
            {"status": "Extracting", "progressDetail": {"current": 5, "total": 10}, "id": i},
            {"status": "Pull complete", "progressDetail": {}, "id": i},
        ]
    out += [
        {"status": "Digest: sha256:" + "a" * 64},
        {"status": "Status: Downloaded newer image for reg.io/team/app:1"},
    ]
    return out


def test_a_long_pull_is_a_few_lines_not_one_per_event() -> None:
    events = pull_events()
    transfer = Transfer("pulling reg.io/team/app:1", started=0.0)
    said: list[str] = []
    for n, event in enumerate(events):  # one event every 0.1 s: 17 s in all
        said += transfer.feed(event, n * 0.1)
    said.append(transfer.end(len(events) * 0.1))
    assert len(events) > 150 and len(said) == 7, said
    app = "pulling reg.io/team/app:1: "
    assert said == [
        app + "Pulling from team/app",
        # a summary every 5 s while layers move; the whole size once every layer said its own
        app + "0/3 layers, 9.4 MB so far (5 s)",
        app + "1/3 layers, 18.6 MB so far (10 s)",
        app + "2/3 layers, 27.8 of 30.0 MB (15 s)",
        app + "Digest: sha256:" + "a" * 64,
        app + "Status: Downloaded newer image for reg.io/team/app:1",
        app + "done in 16.8 s: 3 layers, 30.0 MB",
    ]


def test_a_quick_pull_says_only_the_engines_lines_and_the_end() -> None:
    transfer = Transfer("pulling app:1", started=0.0)
    said = [line for e in pull_events(layers=2, steps=3) for line in transfer.feed(e, 1.0)]
    assert said == [
        "pulling app:1: Pulling from team/app",
        "pulling app:1: Digest: sha256:" + "a" * 64,
        "pulling app:1: Status: Downloaded newer image for reg.io/team/app:1",
    ]
    assert transfer.end(2.0) == "pulling app:1: done in 2.0 s: 2 layers, 20.0 MB"


def test_layers_already_there_are_counted_apart_and_a_push_reads_alike() -> None:
    transfer = Transfer("pushing reg.io/app:abc", started=0.0)
    events = [
        {"status": "The push refers to repository [reg.io/app]"},
        {"status": "Preparing", "progressDetail": {}, "id": "l1"},
        {"status": "Preparing", "progressDetail": {}, "id": "l2"},
        {"status": "Layer already exists", "progressDetail": {}, "id": "l1"},
        {"status": "Pushing", "progressDetail": {"current": 512, "total": 2048}, "id": "l2"},
        {"status": "Pushed", "progressDetail": {}, "id": "l2"},
        {"status": "abc: digest: sha256:" + "b" * 64 + " size: 527"},
    ]
    said = [line for e in events for line in transfer.feed(e, 0.5)]
    assert said == [
        "pushing reg.io/app:abc: The push refers to repository [reg.io/app]",
        "pushing reg.io/app:abc: abc: digest: sha256:" + "b" * 64 + " size: 527",
    ]
    assert transfer.end(1.0) == (
        "pushing reg.io/app:abc: done in 1.0 s: 2 layers, 1 already there, 0.0 MB"
    )


def test_a_pull_of_layers_the_engine_had_names_none() -> None:
    """The engine names no layer it already has (a pull of a tag of an image it holds)."""
    transfer = Transfer("pulling reg.io/app:2", started=0.0)
    said = transfer.feed({"status": "Pulling from app", "id": "2"}, 0.1)
    said += transfer.feed({"status": "Status: Downloaded newer image for reg.io/app:2"}, 0.2)
    assert transfer.end(0.3) == "pulling reg.io/app:2: done in 0.3 s"


def test_odd_events_say_nothing_wrong() -> None:
    transfer = Transfer("pulling x", started=0.0, interval=0.0)
    assert transfer.feed({}, 1.0) == []
    assert transfer.feed({"status": "  ", "id": "a"}, 1.0) == []
    assert not transfer.seen
    # no total, a negative or a huge count: bytes not claimed beyond the size
    assert transfer.feed(
        {"status": "Downloading", "id": "a", "progressDetail": {"current": 9, "total": 0}}, 2.0
    ) == ["pulling x: 0/1 layers (2 s)"]
    assert transfer.feed(
        {"status": "Downloading", "id": "a", "progressDetail": {"current": 99, "total": 10}}, 3.0
    ) == ["pulling x: 0/1 layers, 0.0 of 0.0 MB (3 s)"]
    assert transfer.sizes == {"a": (10, 10)}
    assert TRANSFER_INTERVAL == 5.0


def test_the_workspace_progress_logs_a_pull_in_a_few_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = pull_events()
    with caplog.at_level(logging.INFO, logger="torchx_provider.schedulers.workspace"):
        assert engine_progress(iter(events), quiet=False, what="pulling reg.io/team/app:1") is None
    lines = [r.getMessage() for r in caplog.records]
    # all in one go (no time passes): the engine's lines and the end
    assert len(lines) == 4, lines
    assert lines[-1].startswith("pulling reg.io/team/app:1: done in ") and lines[-1].endswith(
        "3 layers, 30.0 MB"
    )
