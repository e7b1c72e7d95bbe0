"""Print TorchX 0.7.0's user-facing surface as JSON (run with TorchX's own interpreter).

``python dump_surface.py '<JSON list of mount token lists>'`` prints one JSON object:

* ``components``: ``{"utils.sh": [{"name", "kind", "default", "annotation"}, ...], ...}``;
* ``run_options``: ``{"kubernetes": {"queue": {"type", "default", "required"}, ...}, ...}``;
* ``named_resources``: ``{"aws_p4d.24xlarge": {"cpu", "gpu", "memMB", "capabilities",
  "devices"}, ...}`` (the built-in ones and the ``torchx.named_resources`` entry points);
* ``mounts``: for each token list, the mounts ``specs.parse_mounts`` makes, or its error.

Only the standard library and TorchX are imported: this runs in TorchX's environment, never
next to the provider.
"""

import dataclasses
import inspect
import json
import logging
import sys
import warnings

logging.disable(logging.WARNING)
warnings.simplefilter("ignore")

from torchx import specs  # noqa: E402
from torchx.schedulers.docker_scheduler import DockerScheduler  # noqa: E402
from torchx.schedulers.kubernetes_mcad_scheduler import KubernetesMCADScheduler  # noqa: E402
from torchx.schedulers.kubernetes_scheduler import KubernetesScheduler  # noqa: E402
from torchx.specs.finder import get_components  # noqa: E402


def plain(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def type_name(t):
    return getattr(t, "__name__", None) if isinstance(t, type) else str(t).replace("typing.", "")


def main():
    out = {"components": {}, "run_options": {}, "named_resources": {}, "mounts": []}
    for name, component in sorted(get_components().items()):
        if name.count(".") != 1:
            continue  # only the built-in components (module.function)
        out["components"][name] = [
            {
                "name": p.name,
                "kind": p.kind.name,
                "default": None if p.default is inspect.Parameter.empty else plain(p.default),
                "required": p.default is inspect.Parameter.empty,
                "annotation": type_name(p.annotation),
            }
            for p in inspect.signature(component.fn).parameters.values()
        ]
    schedulers = {
        "kubernetes": KubernetesScheduler("x"),
        "kubernetes_mcad": KubernetesMCADScheduler("x"),
        "local_docker": DockerScheduler("x"),
    }
    for backend, scheduler in schedulers.items():
        out["run_options"][backend] = {
            name: {
                "type": type_name(opt.opt_type),
                "default": plain(opt.default),
                "required": opt.is_required,
            }
            for name, opt in scheduler.run_opts()
        }
    for name in specs._named_resource_factories:
        out["named_resources"][name] = dataclasses.asdict(specs.named_resources[name])
    for tokens in json.loads(sys.argv[1]):
        try:
            mounts = specs.parse_mounts(tokens)
            out["mounts"].append(
                [{"type": type(m).__name__, **dataclasses.asdict(m)} for m in mounts]
            )
        except Exception as e:
            out["mounts"].append({"error": f"{type(e).__name__}: {e}"})
    print(json.dumps(out))


main()
