"""What the real-training tiers check of a task log (tests/support/torch_image.py), on lines
shaped like real runs'."""

from __future__ import annotations

import pytest

from torch_image import step_lines


def test_step_lines_reads_each_rank_step_under_its_replica() -> None:
    lines = [
        "[trainer/1] [0]:rank=2 world_size=4 step=5 loss=4.637748",
        "[trainer/0] [1]:rank=1 world_size=4 step=5 loss=4.637748",
        "[trainer/0] [1]:Failures:",
        "[trainer/0]   [1]:",
        "[trainer/0]     time      : 2026-12-02_14:38:20",
    ]
    found = step_lines(lines)
    assert [(m["key"], m["rank"], m["step"]) for m in found] == [
        ("trainer/1", "2", "5"),
        ("trainer/0", "1", "5"),
    ]


def test_a_line_with_the_next_lines_prefix_glued_to_it_fails_saying_so() -> None:
    # from a real run: rank 2's text, then the next line's "[0]:", then the newline
    lines = [
        "[trainer/1] [0]:rank=2 world_size=4 step=5 loss=4.637748[0]:",
        "[trainer/1] [1]:rank=3 world_size=4 step=5 loss=4.637748",
    ]
    with pytest.raises(AssertionError, match=r"glued, first .*step=5 loss=4\.637748\[0\]:"):
        step_lines(lines)
