"""An ``AppStatus`` from plain data (states by name, roles with replicas), made with either
TorchX 0.7.0's ``torchx.specs`` or this package's: ``dump_specs.py`` (in TorchX's
environment) and the test beside the provider build each case alike.

Only the standard library is imported: this runs in TorchX's environment too.
"""

from __future__ import annotations

from typing import Any


def app_status(specs: Any, case: dict[str, Any]) -> Any:
    """``specs.AppStatus`` of ``case``, with ``specs`` the module that makes it."""
    return specs.AppStatus(
        specs.AppState[case["state"]],
        num_restarts=case.get("num_restarts", 0),
        msg=case.get("msg", ""),
        structured_error_msg=case.get("structured_error_msg", specs.NONE),
        ui_url=case.get("ui_url"),
        roles=[
            specs.RoleStatus(
                r["role"],
                [
                    specs.ReplicaStatus(
                        x["id"],
                        specs.AppState[x["state"]],
                        x["role"],
                        x["hostname"],
                        x.get("structured_error_msg", specs.NONE),
                    )
                    for x in r["replicas"]
                ],
            )
            for r in case.get("roles", [])
        ],
    )
