"""The run options (``cfg``) of ``local_docker``, declared once as a dataclass.

:class:`DockerOpts` is both the declaration (``DockerOpts.run_opts()``: names, types, defaults
and help, as every backend's ``run_opts()`` returns them) and the typed value the translation
reads (``DockerOpts.from_cfg(cfg)`` after ``run_opts().resolve(cfg)`` checked it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from torchx_provider.errors import InvalidOptionError
from torchx_provider.specs.runopts import CfgVal, runopts
from torchx_provider.specs.validation import env_problem

#: The user-defined bridge network replicas join by default (TorchX's name).
NETWORK = "torchx"

#: The most containers one Docker bridge network holds: a Linux bridge has 1,024 ports, one
#: of them reserved (the engine's "exchange full" past it). The default of ``max_replicas``.
BRIDGE_PORTS = 1023


@dataclass(frozen=True)
class DockerOpts:
    """The run options (``cfg``) of ``local_docker``; each field's help is its metadata."""

    copy_env: list[str] | None = field(
        default=None,
        metadata={
            "type": list[str],
            "help": "glob patterns of host environment variables copied into every replica, "
            "e.g. ['AWS_*', 'HF_TOKEN']; the env option and the role's env win",
        },
    )
    env: dict[str, str] | None = field(
        default=None,
        metadata={
            "type": dict[str, str],
            "help": "environment variables set in every replica, applied over copy_env; "
            "the role's own env wins",
        },
    )
    privileged: bool = field(
        default=False,
        metadata={"type": bool, "help": "run every container privileged (docker run --privileged)"},
    )
    image_repo: str | None = field(
        default=None,
        metadata={
            "type": str,
            "help": "repository that workspace images are tagged with and pushed to, e.g. "
            "registry.example.com/team/app; unset: they stay on the local engine",
        },
    )
    quiet: bool = field(
        default=False,
        metadata={
            "type": bool,
            "help": "log image pull/build/push progress at debug level instead of info",
        },
    )
    network: str = field(
        default=NETWORK,
        metadata={
            "type": str,
            "help": "user-defined bridge network the replicas join (created when missing)",
        },
    )
    remove: bool = field(
        default=True,
        metadata={
            "type": bool,
            "help": "remove the app's containers once it has finished and every replica's "
            "log has been read to its end; TorchXDockerOperator turns it off unless its "
            "task sets it: there on_finish_action decides (delete_succeeded keeps failed "
            "and cancelled apps)",
        },
    )
    stop_on_failure: bool = field(
        default=True,
        metadata={
            "type": bool,
            "help": "when a replica fails with no restarts left (max_retries), stop the app's "
            "other replicas (SIGTERM, SIGKILL 10 s later) so that the app ends FAILED at once "
            "instead of waiting for replicas blocked on the failed one; false: they run on "
            "to their own end",
        },
    )
    max_replicas: int = field(
        default=BRIDGE_PORTS,
        metadata={
            "type": int,
            "help": "most replicas (containers) an app may have over all its roles, refused "
            "in the dry run above it; the default is what one Docker bridge network holds",
        },
    )

    @classmethod
    def run_opts(cls) -> runopts:
        """The :class:`runopts` declared by the fields above."""
        opts = runopts()
        for f in dataclasses.fields(cls):
            default: CfgVal = f.default  # type: ignore[assignment]
            opts.add(f.name, f.metadata["type"], f.metadata["help"], default=default)
        return opts

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, CfgVal]) -> DockerOpts:
        """Typed options from a resolved ``cfg`` (``run_opts().resolve`` did the checking)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in cfg.items() if k in names and v is not None}
        for key, value in (values.get("env") or {}).items():  # type: ignore[union-attr]
            problem = env_problem(key, value)  # the rule of a role's env
            if problem is not None:
                raise InvalidOptionError(f"run option env: {problem}", "env")
        limit = values.get("max_replicas")
        if isinstance(limit, int) and limit < 1:
            raise InvalidOptionError(
                f"run option max_replicas must be at least 1, got {limit}", "max_replicas"
            )
        if "network" in values and not str(values["network"]).strip():
            raise InvalidOptionError(
                "run option network is empty; name a network or leave it unset (torchx)",
                "network",
            )
        return cls(**values)  # type: ignore[arg-type]
