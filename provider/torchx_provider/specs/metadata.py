"""The keys of an app's metadata (``AppDef.metadata``) that this provider reads: part of the
app model, so that a component can set them without importing the layers that read them."""

from __future__ import annotations

#: The key under which a component names the progress pattern of its script (the
#: operator's ``progress_pattern`` and ``cfg`` override it; read by the follow's progress
#: watch, :mod:`torchx_provider.triggers.progress`).
PROGRESS_METADATA_KEY = "torchx_provider/progress_pattern"
