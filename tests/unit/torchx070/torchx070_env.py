"""TorchX 0.7.0's own environment (``scripts/torchx_venv.py``; ``.ci/run`` makes it): the
tests here run a dump script with its Python and compare what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from torchx_venv import existing_torchx_python

IN_CI = bool(os.environ.get("CI"))


def dumped_by_torchx(script: Path, cases: Any) -> dict[str, Any]:
    """What ``script`` prints (its last line, JSON) when TorchX 0.7.0's Python runs it with
    ``cases`` (as JSON) for argument. Without that environment the test skips with the
    reason -- and fails in CI."""
    python = existing_torchx_python()
    if python is None:
        reason = "TorchX 0.7.0's environment is missing: run python scripts/torchx_venv.py"
        if IN_CI:
            pytest.fail(f"{reason} (CI is set: .ci/run makes it)", pytrace=False)
        pytest.skip(reason)
    result = subprocess.run(
        [str(python), str(script), json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dumped: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return dumped
