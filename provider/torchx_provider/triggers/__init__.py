"""The trigger that follows a TorchX app from the triggerer, and the pieces it is made of.

* :mod:`~torchx_provider.triggers.events` -- the typed event (and per-replica rows) a follow
  ends with; pure.
* :mod:`~torchx_provider.triggers.follow` -- the one async follow loop (states, status lines,
  log forwarding with cursors), shared by the trigger and the operator's non-deferrable mode.
* :mod:`~torchx_provider.triggers.selection` -- which replicas' logs are forwarded; pure.
* :mod:`~torchx_provider.triggers.policy` -- how long a follow waits and when it acts:
  outage budget and backoff, deadlines, whether a kill cancels; pure.
* :mod:`~torchx_provider.triggers.connections` -- connections resolved in the triggerer,
  cached per process and resolved again after a 401.
* :mod:`~torchx_provider.triggers.job` -- :class:`TorchXJobTrigger`.

Importing this package imports no client library (and not Airflow's trigger base either).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx_provider.triggers.job import TorchXJobTrigger

__all__ = ["TorchXJobTrigger"]


def __getattr__(name: str) -> Any:
    if name == "TorchXJobTrigger":
        from torchx_provider.triggers.job import TorchXJobTrigger

        return TorchXJobTrigger
    raise AttributeError(name)
