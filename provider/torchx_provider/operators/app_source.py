"""Whatever a DAG author passes as ``app``, turned into one validated AppDef. Pure but for
reading an app file.

Accepted forms:

* an :class:`~torchx_provider.specs.AppDef` (or a ``torchx.specs.AppDef``) -- kept as its dict
  form, so every string in it (image, args, env, name) is templated by Airflow;
* a dict in the same form;
* the path of a ``.yaml``/``.yml``/``.json`` app file: absolute, or relative to the DAG's
  folder or ``template_searchpath``; its text is rendered with Jinja, then parsed;
* YAML/JSON text of an app;
* a component name such as ``"dist.ddp"``, called with ``app_args``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef

APP_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def app_to_template(app: Any) -> Any:
    """The form the operator keeps (and Airflow templates): dicts for app objects."""
    from torchx_provider.specs.serialization import from_torchx, to_dict

    if isinstance(app, AppDef):
        return to_dict(app)
    if isinstance(app, os.PathLike):
        return os.fspath(app)
    if isinstance(app, (str, Mapping)) or app is None:
        return app
    if hasattr(app, "roles") and hasattr(app, "name"):
        return to_dict(from_torchx(app))
    raise InvalidAppError(
        f"cannot make an app out of a {type(app).__name__}; pass an AppDef, a dict, the path "
        "of a YAML/JSON app file, or a component name such as 'dist.ddp' with app_args",
        "app",
    )


def find_app_file(name: str, search_paths: Iterable[str]) -> Path:
    """The app file ``name``: absolute, else the first match under ``search_paths``."""
    path = Path(name).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path(d) / path for d in search_paths] + [Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c.parent) for c in candidates)
    raise InvalidAppError(f"app file {name!r} not found (looked in: {looked})", "app")


def _parse_text(text: str, where: str) -> Any:
    import yaml

    try:
        return json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise InvalidAppError(f"{where} is not valid YAML/JSON: {e}", "app") from None


def resolve_app(
    source: Any,
    app_args: Mapping[str, Any] | list[Any] | None = None,
    app_name: str | None = None,
    *,
    render_text: Callable[[str], str] = lambda text: text,
    search_paths: Iterable[str] = (),
) -> AppDef:
    """Turn ``source`` (see the module doc) into a validated AppDef named ``app_name`` if given."""
    from torchx_provider.components import run_component
    from torchx_provider.specs.serialization import from_dict

    is_component = (
        isinstance(source, str)
        and not source.endswith(APP_FILE_SUFFIXES)
        and "\n" not in source
        and not source.lstrip().startswith("{")
    )
    if app_args is not None and not is_component:
        raise InvalidAppError(
            "app_args only apply to a component name (e.g. app='dist.ddp'); "
            "put the values into the app itself",
            "app_args",
        )
    data: Any
    if source is None or (isinstance(source, str) and not source.strip()):
        raise InvalidAppError("no app given: set app", "app")
    if isinstance(source, Mapping):
        data = source
    elif isinstance(source, str) and source.endswith(APP_FILE_SUFFIXES):
        path = find_app_file(source, search_paths)
        try:
            text = path.read_text()
        except OSError as e:
            raise InvalidAppError(
                f"cannot read app file {str(path)!r}: {e.strerror}", "app"
            ) from None
        data = _parse_text(render_text(text), f"app file {str(path)!r}")
    elif isinstance(source, str) and not is_component:
        data = _parse_text(source, "the app text")
    elif isinstance(source, str):
        app = run_component(source.strip(), app_args if app_args is not None else {})
        data = None
    else:
        data = app_to_template(source)
    if data is not None:
        app = from_dict(data)
    if app_name is not None and not isinstance(app_name, str):
        raise InvalidAppError(
            f"app_name must be a string (or None to keep the app's name), got "
            f"{type(app_name).__name__}; e.g. app_name='train-{{{{ ds_nodash }}}}'",
            "app_name",
        )
    if app_name:
        app.name = app_name
        try:
            app.validate()
        except InvalidAppError as e:
            if e.field != "name":
                raise
            raise InvalidAppError(e.message, "app_name") from None
    return app


def dag_search_paths(dag: Any) -> list[str]:
    """Where a task of ``dag`` looks for app files: the DAG's folder, then its
    ``template_searchpath`` (none without a DAG)."""
    if dag is None:
        return []
    paths = [str(dag.folder)]
    searchpath = dag.template_searchpath
    if isinstance(searchpath, str):
        paths.append(searchpath)
    elif searchpath:
        paths.extend(searchpath)
    return paths
