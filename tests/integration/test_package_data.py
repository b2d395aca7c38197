"""The image recipes and the compose template ship in the wheel: an installed (non-editable)
hetero-emu finds images/ and compose-templates/.

Builds a real wheel of the checkout with `pip wheel` (which fetches the build backend from the
package index, hence an integration test), unpacks it into a folder that is then the only copy of
`emulator` on sys.path, and asks the module's own lookup for the recipes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, emulator, emulator.training_images.image_recipes as r
from emulator.planning.compose import load_template
from emulator.backend.image_build import recipe_hash
from emulator.planning.hooks import SOURCES
training = r.load_recipe("training")
print(json.dumps({
    "emulator": emulator.__file__,
    "images": str(r.images_dir()),
    "variants": r.variant_names(),
    "files": sorted(p.relative_to(training.folder).as_posix() for p in training.files()),
    "packages": training.packages,
    "hash": recipe_hash(training),
    "hooks": {name: str(path) for name, path in SOURCES.items() if path.is_file()},
    "compose_template": load_template().source,
}))
"""


def test_image_recipes_are_found_from_a_built_wheel(tmp_path: Path) -> None:
    # A copy of the checkout: setuptools builds in the source folder, and a stale build/ there
    # could hand the wheel files the checkout no longer has.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--quiet", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("hetero_emu-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    assert {"emulator/images/README.md", "emulator/images/training/recipe.yaml",
            "emulator/images/training/Dockerfile", "emulator/data/startup/sitecustomize.py",
            "emulator/data/instance/nvidia-smi",
            "emulator/compose_templates/compose.yaml"} <= names
    # Only the unpacked wheel provides `emulator`: the checkout is not on the path, cwd is elsewhere.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    site = tmp_path / "site" / "emulator"
    assert found["emulator"] == str(site / "__init__.py")
    assert found["images"] == str(site / "images")
    assert "training" in found["variants"]
    # The start-up hook (`--debug-host`, the vCPU count) and the emulated nvidia-smi are staged from the
    # installed package.
    assert found["hooks"] == {"sitecustomize.py": str(site / "data" / "startup" / "sitecustomize.py"),
                              "nvidia-smi": str(site / "data" / "instance" / "nvidia-smi")}
    # `render` fills the top-level compose-templates/compose.yaml, shipped as emulator/compose_templates.
    assert found["compose_template"] == str(site / "compose_templates" / "compose.yaml")
    in_checkout = sorted(p.relative_to(ROOT / "images" / "training").as_posix()
                         for p in (ROOT / "images" / "training").rglob("*") if p.is_file())
    assert found["files"] == in_checkout
    assert "openmpi-bin" in found["packages"]
    # Same recipe, same hash: an installed hetero-emu agrees with the checkout on what is up to date.
    from emulator.backend.image_build import recipe_hash

    assert found["hash"] == recipe_hash()
