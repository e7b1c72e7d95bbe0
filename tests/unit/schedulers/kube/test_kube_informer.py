"""The informer's list/watch loop against a scripted watch stream, and the raw-JSON helpers."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from torchx_provider.schedulers.backoff import Backoff
from torchx_provider.schedulers.kube.informer import Informer, Keep, WatchError, object_name
from torchx_provider.schedulers.kube.io_async import json_lines, status_error


def obj(name: str, version: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": labels,
            "managedFields": [{"manager": "x"}],
        }
    }


def event(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": body}


Step = list[dict[str, Any]] | BaseException


class ScriptedSource:
    """Lists and watches answered from scripts; when a script runs out, the call waits."""

    def __init__(self, lists: list[Any], watches: list[Step]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, ...]] = []
        self.idle = asyncio.Event()
        self.keep: Keep | None = None

    async def _wait(self) -> None:
        self.idle.set()
        await asyncio.Event().wait()

    async def list(self, keep: Keep | None = None) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(("list",))
        self.keep = keep
        if not self.lists:
            await self._wait()
        step = self.lists.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[Any]:
        self.calls.append(("watch", resource_version))
        if not self.watches:
            await self._wait()
        step = self.watches.pop(0)
        if isinstance(step, BaseException):
            raise step
        for e in step:
            yield e


class Recorder:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.changes: list[tuple[str | None, bool]] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)

    def listener(self, key: str | None, deleted: Any) -> None:
        self.changes.append((key, deleted is not None))


async def run_until_idle(
    source: ScriptedSource, index: Callable[[Any], str | None] = object_name
) -> tuple[Informer, Recorder]:
    rec = Recorder()
    informer = Informer(source, index, sleep=rec.sleep, backoff=Backoff(rng=random.Random(1)))
    informer.listener = rec.listener
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(source.idle.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return informer, rec


async def test_lists_then_watches_from_the_newest_version_bookmarks_included() -> None:
    source = ScriptedSource(
        [([obj("a", "5")], "10")],
        [
            [event("ADDED", obj("b", "11")), event("BOOKMARK", obj("", "15"))],
            [event("MODIFIED", obj("a", "16")), event("DELETED", obj("b", "17"))],
        ],
    )
    informer, rec = await run_until_idle(source)
    assert source.calls == [("list",), ("watch", "10"), ("watch", "15"), ("watch", "17")]
    assert [o["metadata"]["resourceVersion"] for o in informer.get("a")] == ["16"]
    assert informer.get("b") == []
    assert "managedFields" not in informer.get("a")[0]["metadata"]
    assert rec.changes == [("a", False), (None, False), ("b", False), ("a", False), ("b", True)]
    assert informer.healthy and rec.sleeps == []


@pytest.mark.parametrize(
    "gone",
    [WatchError(410, "too old"), [event("ERROR", {"kind": "Status", "code": 410})]],
    ids=["http-status", "error-event"],
)
async def test_gone_relists_and_reports_what_vanished(gone: Step) -> None:
    source = ScriptedSource(
        [([obj("a", "5"), obj("b", "6")], "10"), ([obj("a", "5"), obj("c", "20")], "21")],
        [gone],
    )
    informer, rec = await run_until_idle(source)
    assert source.calls == [("list",), ("watch", "10"), ("list",), ("watch", "21")]
    assert sorted(informer.groups) == ["a", "c"]
    # After the relist: b deleted (with its last object), c added, a unchanged (same version).
    assert rec.changes[-2:] == [("b", True), ("c", False)]
    assert rec.sleeps == []  # 410 is not a failure: no wait


async def test_429_waits_retry_after_then_relists() -> None:
    source = ScriptedSource(
        [([obj("a", "5")], "10"), ([obj("a", "5")], "12")],
        [WatchError(429, "slow down", retry_after=7.0)],
    )
    informer, rec = await run_until_idle(source)
    assert rec.sleeps == [7.0]
    assert source.calls == [("list",), ("watch", "10"), ("list",), ("watch", "12")]
    assert informer.healthy


async def test_failures_back_off_with_jitter_and_make_the_cache_unhealthy() -> None:
    source = ScriptedSource(
        [ConnectionError("down"), WatchError(500, "boom"), ConnectionError("down"), ([], "3")],
        [],
    )
    rec = Recorder()
    informer = Informer(source, object_name, sleep=rec.sleep, backoff=Backoff(base=1, cap=3))
    health: list[bool] = []
    informer.listener = lambda key, deleted: health.append(informer.healthy)
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(source.idle.wait(), 5)
    task.cancel()
    assert [c[0] for c in source.calls] == ["list", "list", "list", "list", "watch"]
    # attempt n waits within [2**n / 2, 2**n], capped at 3 s
    for n, waited in enumerate(rec.sleeps):
        ceiling = min(3, 2**n)
        assert ceiling / 2 <= waited <= ceiling
    assert len(rec.sleeps) == 3
    assert informer.healthy and health == [True]  # told once: when current again


async def test_a_failing_watch_makes_the_cache_unhealthy_until_the_relist() -> None:
    source = ScriptedSource([([obj("a", "5")], "10")], [ConnectionError("reset")])
    rec = Recorder()
    informer = Informer(source, object_name, sleep=rec.sleep)
    seen: list[bool] = []
    informer.listener = lambda key, deleted: seen.append(informer.healthy) if key is None else None
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(source.idle.wait(), 5)
    task.cancel()
    # Told when synced; not when the watch failed (followers keep their pace), though the
    # cache is unhealthy until the relist (which here waits for ever).
    assert seen == [True]
    assert not informer.healthy and isinstance(informer.error, ConnectionError)
    assert informer.get("a")  # the last picture is kept


async def test_a_watch_refused_after_good_lists_backs_off_longer_and_longer() -> None:
    refused = WatchError(403, "cannot watch jobs")
    source = ScriptedSource([([], "1")] * 5, [refused] * 5)
    rec = Recorder()
    informer = Informer(source, object_name, sleep=rec.sleep, backoff=Backoff(base=1, cap=60))
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(source.idle.wait(), 5)
    task.cancel()
    assert len(rec.sleeps) == 5
    for n, waited in enumerate(rec.sleeps):
        assert 2**n / 2 <= waited <= 2**n


async def test_unserved_type_is_an_empty_healthy_cache_asked_again_later() -> None:
    source = ScriptedSource([WatchError(404, "no such resource")], [])
    informer, rec = await run_until_idle(source)
    assert informer.healthy and informer.groups == {}
    assert rec.sleeps == [300.0]
    assert source.calls == [("list",), ("list",)]


async def test_objects_are_grouped_by_index_and_move_when_relabelled() -> None:
    source = ScriptedSource(
        [([obj("p1", "1", app="x"), obj("p2", "2", app="x"), obj("q", "3")], "3")],
        [[event("MODIFIED", obj("p2", "4", app="y"))]],
    )
    informer, _ = await run_until_idle(source, lambda o: o["metadata"]["labels"].get("app"))
    assert [object_name(o) for o in informer.get("x")] == ["p1"]
    assert [object_name(o) for o in informer.get("y")] == ["p2"]
    assert "q" not in informer.groups


def test_backoff_is_bounded_and_resets() -> None:
    b = Backoff(base=0.5, cap=4.0, rng=random.Random(3))
    waits = [b.next() for _ in range(8)]
    assert all(w <= 4.0 for w in waits) and waits[-1] >= 2.0
    b.reset()
    assert b.next() <= 0.5


async def test_json_lines_of_any_length_across_chunks() -> None:
    big = b'{"x": "' + b"a" * 300_000 + b'"}'

    async def chunks() -> AsyncIterator[bytes]:
        for piece in (b'{"a": 1}\n{"b"', b": 2}\n\n", big[:1000], big[1000:], b"\n", b'{"c": 3}'):
            yield piece

    assert [line async for line in json_lines(chunks())] == [
        b'{"a": 1}',
        b'{"b": 2}',
        big,
        b'{"c": 3}',
    ]


def test_status_error_reads_the_message_and_retry_after() -> None:
    e = status_error(429, {"Retry-After": "3"}, b'{"kind": "Status", "message": "too many"}')
    assert (e.status, e.retry_after, str(e)) == (429, 3.0, "429: too many")
    e = status_error(500, {}, b"<html>oops")
    assert (e.status, e.retry_after) == (500, None) and "oops" in str(e)


class RawAnswer:
    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.reason, self.headers, self.body = status, "x", {}, body
        self.released = False

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        self.released = True


async def test_raw_answers_with_an_error_status_raise_like_preloaded_ones() -> None:
    from torchx_provider.errors import BackendUnavailableError, SubmissionError
    from torchx_provider.schedulers.kube.errors import api_errors
    from torchx_provider.schedulers.kube.io_async import read_ok

    ok = RawAnswer(200, b"line\n")
    assert await read_ok(ok) == b"line\n" and ok.released
    waiting = RawAnswer(400, b'{"kind": "Status", "message": "container is waiting"}')
    with pytest.raises(SubmissionError, match="waiting") as e, api_errors("read", "a log"):
        await read_ok(waiting)
    assert e.value.status == 400 and waiting.released
    with pytest.raises(BackendUnavailableError), api_errors("read", "a log"):
        await read_ok(RawAnswer(503, b"unavailable"))


class PagedAnswers:
    """A :class:`ListWatch` whose API answers from ``pages``: continue token -> (next token,
    names, bytes of padding per object); it notes each call's parameters."""

    def __init__(self, pages: dict[str, tuple[str, list[str], int]]) -> None:
        self.pages = pages
        self.asked: list[dict[str, Any]] = []

    def source(self) -> Any:
        import json

        from torchx_provider.schedulers.kube.io_async import ListWatch

        answers = self

        class Answer:
            status, headers = 200, {}

            def __init__(self, body: bytes) -> None:
                self.body = body

            async def read(self) -> bytes:
                return self.body

            def release(self) -> None:
                pass

        class Paged(ListWatch):
            async def _call(self, **params: Any) -> Any:
                answers.asked.append(params)
                token, names, pad = answers.pages[params.get("_continue", "")]
                meta = {"resourceVersion": "42", **({"continue": token} if token else {})}
                items = [{"metadata": {"name": n}, "pad": "x" * pad} for n in names]
                return Answer(json.dumps({"metadata": meta, "items": items}).encode())

        async def no_api() -> Any:
            raise AssertionError("not called")

        return Paged(no_api, None, "ns", "")


async def test_a_list_is_read_in_pages_of_one_snapshot() -> None:
    """A namespace of many Events or pods is listed a page at a time (each parse short),
    every page continuing the first; the items of all pages, the snapshot's version."""
    from torchx_provider.schedulers.kube.io_async import LIST_PAGE

    answers = PagedAnswers(
        {"": ("a", ["o1", "o2"], 0), "a": ("b", ["o3"], 0), "b": ("", ["o4"], 0)}
    )
    items, version = await answers.source().list()
    assert [object_name(o) for o in items] == ["o1", "o2", "o3", "o4"] and version == "42"
    assert [p.get("_continue") for p in answers.asked] == [None, "a", "b"]
    assert answers.asked[0]["limit"] == LIST_PAGE


async def test_pages_are_sized_to_what_the_objects_weigh() -> None:
    """After the first page, each asks for as many objects as a page's bytes hold at the
    weight seen: heavy objects, fewer per page (down to a floor); light ones, more (up to a
    ceiling)."""
    from torchx_provider.schedulers.kube.io_async import (
        LIST_PAGE,
        PAGE_BYTES,
        PAGE_MAX,
        PAGE_MIN,
    )

    medium, heavy = PAGE_BYTES // 50, PAGE_BYTES // 5
    answers = PagedAnswers(
        {
            "": ("a", ["m1", "m2"], medium),  # about 50 fill a page
            "a": ("b", ["h1"], heavy),  # about 5: fewer than the floor
            "b": ("", ["l1"], 0),
        }
    )
    await answers.source().list()
    limits = [p["limit"] for p in answers.asked]
    assert limits[0] == LIST_PAGE and 45 <= limits[1] <= 50 and limits[2] == PAGE_MIN
    light = PagedAnswers({"": ("a", ["l1"], 0), "a": ("", ["l2"], 0)})
    await light.source().list()
    assert [p["limit"] for p in light.asked] == [LIST_PAGE, PAGE_MAX]


async def test_a_list_drops_what_the_informer_would_not_keep_as_it_reads() -> None:
    """Objects the informer's index gives no key are dropped page by page (a namespace's
    Events about unfollowed apps are never all held at once)."""
    answers = PagedAnswers({"": ("a", ["keep-1", "drop-1"], 0), "a": ("", ["drop-2", "keep-2"], 0)})
    items, _ = await answers.source().list(lambda o: object_name(o).startswith("keep"))
    assert [object_name(o) for o in items] == ["keep-1", "keep-2"]


async def test_the_informer_asks_its_source_for_what_its_index_keeps() -> None:
    source = ScriptedSource([([obj("a", "1"), obj("b", "1")], "1")], [])
    informer = Informer(source, lambda o: None if object_name(o) == "b" else object_name(o))
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 5)
    assert source.keep is not None
    assert [source.keep(obj(n, "1")) for n in ("a", "b")] == [True, False]
    assert [object_name(o) for o in informer.get("a")] == ["a"] and informer.get("b") == []
    task.cancel()


async def test_a_page_is_parsed_and_filtered_with_the_garbage_collector_paused() -> None:
    """Collections while a page's objects are alive would age them into the oldest
    generation and set off whole-heap collections (long stalls of a triggerer's loop); the
    collector is back on once the page is read, and left off if it was off."""
    import gc

    seen: list[bool] = []

    def keep(o: Mapping[str, Any]) -> bool:
        seen.append(gc.isenabled())
        return True

    answers = PagedAnswers({"": ("a", ["o1"], 0), "a": ("", ["o2"], 0)})
    assert gc.isenabled()
    await answers.source().list(keep)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        await answers.source().list(keep)
        assert not gc.isenabled()
    finally:
        gc.enable()
