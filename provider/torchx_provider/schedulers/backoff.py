"""How long to wait before trying again: exponential delays with jitter, one rule for every
stream this provider keeps open (Kubernetes watches, the Docker engine's events)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    """Exponential delays with jitter: attempt ``n`` waits a random time in
    ``[base * 2**n / 2, base * 2**n]``, at most ``cap`` seconds.

    >>> b = Backoff(base=1.0, cap=8.0, rng=random.Random(0))
    >>> [round(b.next(), 2) for _ in range(5)]
    [0.92, 1.76, 2.84, 5.04, 6.05]
    """

    base: float = 1.0
    cap: float = 60.0
    rng: random.Random | None = None
    attempt: int = 0

    def next(self) -> float:
        ceiling = min(self.cap, self.base * 2**self.attempt)
        self.attempt += 1
        return (self.rng or random).uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
