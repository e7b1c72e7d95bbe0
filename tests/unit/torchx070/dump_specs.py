"""Print what TorchX 0.7.0's ``torchx.specs`` names do, as JSON (run with TorchX's interpreter).

``python dump_specs.py '<JSON cases>'``, the cases an object of:

* ``handles``: app handles, each parsed with ``parse_app_handle`` (and ``handle_errors``:
  the text of what it raised, or null);
* ``types``: type expressions (``typing.List[str]``, ``list[str]``...) for ``get_type_name``
  (and ``type_strs``: how this interpreter prints each, ``str(tp)``);
* ``resolve``: run option dicts resolved against options ``queue`` (str, required) and
  ``n`` (int, default 1);
* ``statuses``: ``AppStatus`` fields as plain data (states by name, roles with replicas),
  plus ``filter`` (the roles ``format`` shows).

It prints one JSON object with, for each case, what TorchX returned or the class of what it
raised, and: ``all`` (``torchx.specs.__all__``), ``role`` (each ``Role`` field and its
default), ``missing``, ``exceptions`` (each exception's built-in bases, messages and
attributes) and ``aws`` (``named_resources_aws``: its table, functions and constants).

Only the standard library, TorchX and ``app_status.py`` beside it are imported: this runs in
TorchX's environment, never next to the provider.
"""

import dataclasses
import json
import logging
import sys
import typing
import warnings

logging.disable(logging.WARNING)
warnings.simplefilter("ignore")

from app_status import app_status  # noqa: E402
from torchx import specs  # noqa: E402
from torchx.specs import api, named_resources_aws  # noqa: E402


def plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def outcome(call):
    try:
        return {"value": plain(call())}
    except Exception as e:
        return {"error": type(e).__name__, "cfg_key": getattr(e, "cfg_key", None)}


def error_text(call):
    try:
        call()
    except Exception as e:
        return str(e)
    return None


def role_defaults():
    out = {}
    for f in dataclasses.fields(specs.Role):
        if f.default is not dataclasses.MISSING:
            out[f.name] = {"required": False, "default": plain(f.default)}
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = {"required": False, "default": plain(f.default_factory())}
        else:
            out[f.name] = {"required": True, "default": None}
    return out


def describe_status(case):
    s = app_status(specs, case)
    try:
        s.raise_for_status()
        raised = None
    except api.AppStatusError as e:
        raised = {"message": str(e), "same_status": e.status is s}
    return {
        "format": s.format(),
        "filtered": s.format(filter_roles=case.get("filter")),
        # with replicas, TorchX's repr holds Python object tags: compared without replicas
        "repr": repr(s) if not case.get("roles") else None,
        "terminal": s.is_terminal(),
        "raised": raised,
    }


def exceptions():
    classes = {
        "InvalidRunConfigException": specs.InvalidRunConfigException,
        "MalformedAppHandleException": specs.MalformedAppHandleException,
        "AppStatusError": api.AppStatusError,
    }
    out = {
        name: [c.__name__ for c in cls.__mro__ if c.__module__ == "builtins"]
        for name, cls in classes.items()
    }
    given = specs.InvalidRunConfigException("Run option: n, bad", "n", {"n": "x"})
    empty = specs.InvalidRunConfigException("Required run option: queue", "queue", {})
    out["run_config_messages"] = [[str(given), given.cfg_key], [str(empty), empty.cfg_key]]
    return out


def aws():
    table = named_resources_aws.NAMED_RESOURCES
    return {
        "names": list(table),
        "resources": {name: dataclasses.asdict(factory()) for name, factory in table.items()},
        "functions": {
            name: dataclasses.asdict(getattr(named_resources_aws, name)())
            for name in dir(named_resources_aws)
            if name.startswith("aws_")
        },
        "constants": {
            name: getattr(named_resources_aws, name)
            for name in ("EFA_DEVICE", "NEURON_DEVICE", "MEM_TAX", "K8S_ITYPE", "GiB")
        },
        "instance_type": named_resources_aws.instance_type_from_resource(
            named_resources_aws.aws_g5_12xlarge()
        ),
    }


def main():
    cases = json.loads(sys.argv[1])
    opts = specs.runopts()
    opts.add("queue", type_=str, help="queue", required=True)
    opts.add("n", type_=int, help="n", default=1)
    out = {
        "all": sorted(specs.__all__),
        "role": role_defaults(),
        "missing": specs.MISSING,
        "handles": [
            outcome(lambda h=h: tuple(specs.parse_app_handle(h))) for h in cases["handles"]
        ],
        "handle_errors": [
            error_text(lambda h=h: specs.parse_app_handle(h)) for h in cases["handles"]
        ],
        "types": [specs.get_type_name(eval(t, {"typing": typing})) for t in cases["types"]],
        "type_strs": [str(eval(t, {"typing": typing})) for t in cases["types"]],
        "resolve": [outcome(lambda c=c: opts.resolve(c)) for c in cases["resolve"]],
        "statuses": [describe_status(c) for c in cases["statuses"]],
        "exceptions": exceptions(),
        "aws": aws(),
    }
    print(json.dumps(out))


main()
