"""The layers contract (`[tool.importlinter]` in pyproject.toml) holds: imports only go down.

`lint-imports` runs on a copy of the packages, as they are and with one upward import added,
so that the contract is seen to pass today and to fail on a shortcut up (an empty or
misnamed contract would pass both)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The climbs the contract was written against: each was in the code until the shared piece
# moved below its users.
UPWARD = [
    ("supervisor/client.py", "from supervisor.cli import status"),
    ("supervisor/web/serving.py", "from supervisor.cli import support"),
    ("supervisor/job/under_lease.py", "from supervisor.service import daemon"),
    ("supervisor/pool/membership.py", "from supervisor.service import serving"),
    ("supervisor/config.py", "from supervisor.pool import scheduler"),
    ("supervisor/core/leases.py", "from supervisor.store import records"),
    ("sandbox/child.py", "import supervisor.errors"),
]


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the packages under `tree`, with its pyproject.toml."""
    return subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as main; main()",
         "--no-cache"],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("layers")
    for package in ("supervisor", "sandbox"):
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def test_the_layers_contract_is_kept(tree: Path) -> None:
    run = lint_imports(tree)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Layers that only go down KEPT" in run.stdout


@pytest.mark.parametrize(("module", "line"), UPWARD)
def test_an_upward_import_breaks_the_contract(tree: Path, module: str, line: str) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(f"{original}\n{line}  # noqa\n")
    try:
        run = lint_imports(tree)
    finally:
        path.write_text(original)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Layers that only go down BROKEN" in run.stdout
    importer = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert f"- {importer} -> " in run.stdout
