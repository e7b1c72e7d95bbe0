"""The app model, API-compatible with ``torchx.specs``.

Import from here, as TorchX users import from ``torchx.specs``::

    from torchx_provider import specs
    app = specs.AppDef("hello", roles=[specs.Role("echo", image="busybox", entrypoint="echo")])
"""

from torchx_provider.specs import named_resources_aws
from torchx_provider.specs.api import (
    MISSING,
    NAMED_RESOURCES,
    NONE,
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    AppState,
    BindMount,
    DeviceMount,
    Mount,
    ReplicaState,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
    VolumeMount,
    is_terminal,
    macros,
    resource,
)
from torchx_provider.specs.exceptions import (
    AppStatusError,
    InvalidRunConfigException,
    MalformedAppHandleException,
)
from torchx_provider.specs.mounts import parse_mounts
from torchx_provider.specs.names import (
    AppHandle,
    ParsedAppHandle,
    is_rfc1123_name,
    make_app_handle,
    make_unique,
    normalize_rfc1123_name,
    parse_app_handle,
    random_id,
)
from torchx_provider.specs.resource_registry import (
    get_named_resource,
    get_named_resources,
    named_resources,
)
from torchx_provider.specs.runopts import CfgVal, get_type_name, runopt, runopts
from torchx_provider.specs.serialization import (
    from_dict,
    from_torchx,
    load_app,
    load_file,
    role_from_dict,
    role_to_dict,
    to_dict,
    to_yaml,
)
from torchx_provider.specs.status import AppStatus
from torchx_provider.specs.validation import validate_app, validate_role

__all__ = [
    "MISSING",
    "NAMED_RESOURCES",
    "NONE",
    "NULL_RESOURCE",
    "AppDef",
    "AppDryRunInfo",
    "AppHandle",
    "AppState",
    "AppStatus",
    "AppStatusError",
    "BindMount",
    "CfgVal",
    "DeviceMount",
    "InvalidRunConfigException",
    "MalformedAppHandleException",
    "Mount",
    "ParsedAppHandle",
    "ReplicaState",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "VolumeMount",
    "from_dict",
    "from_torchx",
    "get_named_resource",
    "get_named_resources",
    "get_type_name",
    "is_rfc1123_name",
    "is_terminal",
    "load_app",
    "load_file",
    "macros",
    "make_app_handle",
    "make_unique",
    "named_resources",
    "named_resources_aws",
    "normalize_rfc1123_name",
    "parse_app_handle",
    "parse_mounts",
    "random_id",
    "resource",
    "role_from_dict",
    "role_to_dict",
    "runopt",
    "runopts",
    "to_dict",
    "to_yaml",
    "validate_app",
    "validate_role",
]
