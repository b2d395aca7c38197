"""`hetero-emu image key / save / load` (emulator.api.image_key, save_image, load_image): an image
exported to a CI cache folder under the key of its recipe and imported back, up to date exactly as a
built one. Against the in-memory engine; the key against the real builders' hashes (no engine asked)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from fake_backend import FakeBackend, fake_recipe_hash
from testkit import invoke

from emulator import api
from emulator.backend import framework_build, huggingface_build, registry
from emulator.backend.docker_images import LocalImages
from emulator.backend.image_build import recipe_hash
from emulator.backend.images import RECIPE_LABEL, ImageKey, archive_problem
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import ImageMissing
from emulator.reports.console import RecordingReporter
from emulator.training_images import frameworks, huggingface
from emulator.training_images.image_recipes import load_recipe

KEY = ImageKey("hetero-emu/training:py311", "0123456789abcdef" + "f" * 48)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    """The engine `hetero-emu` asks by default, in memory, with the default image built (labelled)."""
    engine = FakeBackend(images=(), builds_images=True)
    engine.images.build_default_image(RecordingReporter())
    monkeypatch.setitem(registry._FACTORIES, "docker", lambda: engine)
    return engine


# --------------------------------------------------------------------------------------------------
# The key


def test_the_key_is_a_ci_cache_key_and_names_the_archive() -> None:
    assert KEY.text == "hetero-emu_training_py311-0123456789abcdef"
    assert KEY.file_name == KEY.text + ".tar"
    assert KEY.up_to_date({RECIPE_LABEL: KEY.recipe}) and not KEY.up_to_date({RECIPE_LABEL: "other"})
    assert not KEY.up_to_date({}) and not KEY.up_to_date(None)


def test_only_the_same_image_under_another_key_is_stale() -> None:
    assert KEY.stale_name("hetero-emu_training_py311-fedcba9876543210.tar")
    assert not KEY.stale_name(KEY.file_name)
    assert not KEY.stale_name("hetero-emu_pytorch-training_2.1.0-py311-fedcba9876543210.tar")
    assert not KEY.stale_name("hetero-emu_training_py311-fedcba9876543210.tar.partial")
    assert not KEY.stale_name("notes.txt")


def test_the_key_is_the_hash_a_build_labels_its_image_with_and_asks_no_engine() -> None:
    def no_engine() -> None:
        raise AssertionError("the key asked the engine")

    images = LocalImages(no_engine)  # type: ignore[arg-type]
    training = load_recipe("training")
    assert images.key("training") == ImageKey(training.tag, recipe_hash(training))
    torch = frameworks.choose(*frameworks.parse_framework("pytorch:2.1.0"), "py310")
    assert images.key(torch) == ImageKey(torch.tag, framework_build.recipe_hash(torch))
    hugging = huggingface.build_target("huggingface-pytorch:4.36", None)
    assert hugging is not None
    assert images.key(hugging) == ImageKey(hugging.tag, huggingface_build.recipe_hash(hugging))


def test_image_key_prints_the_key_without_an_engine() -> None:
    """tests/unit points DOCKER_HOST at nothing: the key is still printed."""
    result = invoke("image", "key")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == api.image_key().text
    shown = json.loads(invoke("image", "key", "--framework", "pytorch:2.1.0", "--python", "py310", "--json").stdout)
    assert shown["image"].startswith("hetero-emu/pytorch-training:2.1.0") and shown["file"] == shown["key"] + ".tar"
    assert invoke("image", "key", "--python", "py310").returncode == 2  # --python goes with --framework


# --------------------------------------------------------------------------------------------------
# Save, then load into another engine


def test_a_saved_image_loads_into_a_fresh_engine_up_to_date_and_is_not_built_again(
        fake: FakeBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    saved = api.save_image(cache)
    assert saved.written and saved.archive == cache / saved.key.file_name and saved.key.image == DEFAULT_IMAGE
    assert [p.name for p in cache.iterdir()] == [saved.key.file_name]  # no .partial left

    fresh = FakeBackend(images=(), builds_images=True)
    monkeypatch.setitem(registry._FACTORIES, "docker", lambda: fresh)
    loaded = api.load_image(cache)
    assert loaded.archive == saved.archive and loaded.loaded == (DEFAULT_IMAGE,) and loaded.up_to_date
    # The build that follows a load in CI: nothing to do, as after a build.
    report = api.build_image()
    assert not report.built and fresh.images.built == []


def test_a_second_save_of_the_same_key_writes_nothing(fake: FakeBackend, tmp_path: Path) -> None:
    api.save_image(tmp_path)
    again = api.save_image(tmp_path)
    assert not again.written and fake.call_names().count("images.save") == 1


def test_a_save_removes_the_same_image_s_archives_of_older_keys_only(fake: FakeBackend, tmp_path: Path) -> None:
    key = api.image_key()
    old = tmp_path / (key.text[:-16] + "0" * 16 + ".tar")
    other = tmp_path / "hetero-emu_pytorch-training_2.1.0-py311-0000000000000000.tar"
    for path in (old, other):
        path.write_bytes(b"old")
    saved = api.save_image(tmp_path)
    assert saved.removed == (old,) and not old.exists() and other.exists()


def test_saving_an_image_the_engine_lacks_or_has_out_of_date_says_build_it_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = FakeBackend(labels_of={DEFAULT_IMAGE: {RECIPE_LABEL: "an older recipe"}})
    monkeypatch.setitem(registry._FACTORIES, "docker", lambda: stale)
    with pytest.raises(ImageMissing) as info:
        api.save_image(tmp_path)
    assert info.value.hint == "build it first: hetero-emu image build"
    with pytest.raises(ImageMissing) as info:
        api.save_image(tmp_path, framework="pytorch:2.1.0", python="py310")
    assert info.value.hint == "build it first: hetero-emu image build --framework pytorch:2.1.0 --python py310"
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------
# Loading: a cache miss, a stale archive, a wrong file


def test_a_folder_without_the_key_s_archive_is_a_miss_said_not_failed(fake: FakeBackend, tmp_path: Path) -> None:
    lines: list[str] = []
    for folder in (tmp_path, tmp_path / "never-restored"):
        loaded = api.load_image(folder, progress=lines.append)
        assert loaded.archive is None and not loaded.up_to_date
    assert "images.load" not in fake.call_names()
    assert lines[0].startswith(f"no saved {DEFAULT_IMAGE} of key {api.image_key().text}")


def test_an_archive_of_another_recipe_loads_but_is_said_not_up_to_date(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    older = FakeBackend(labels_of={DEFAULT_IMAGE: {RECIPE_LABEL: "an older recipe"}})
    older.images.save(DEFAULT_IMAGE, tmp_path / "old.tar")
    fresh = FakeBackend(images=(), builds_images=True)
    monkeypatch.setitem(registry._FACTORIES, "docker", lambda: fresh)
    lines: list[str] = []
    loaded = api.load_image(tmp_path / "old.tar", progress=lines.append)
    assert loaded.loaded == (DEFAULT_IMAGE,) and not loaded.up_to_date
    assert lines == [f"{DEFAULT_IMAGE} from {tmp_path / 'old.tar'} is of another recipe than this hetero-emu's: "
                     "`hetero-emu image build` builds it again"]
    assert api.build_image().built  # and the build does


def test_an_archive_of_another_image_is_a_wrong_file(fake: FakeBackend, tmp_path: Path) -> None:
    """Saved with --framework, loaded without it: exit 2, saying what it holds."""
    fake.images.save(DEFAULT_IMAGE, tmp_path / "default.tar")
    result = invoke("image", "load", tmp_path / "default.tar", "--framework", "pytorch:2.1.0", "--python", "py310")
    assert result.returncode == 2
    assert f"error: {tmp_path / 'default.tar'} holds {DEFAULT_IMAGE}, not hetero-emu/pytorch-training:" in result.stderr
    assert "hint: load it with the options it was saved with" in result.stderr


def test_archive_problems_are_said_before_the_engine_is_asked(tmp_path: Path) -> None:
    text = tmp_path / "notes.tar"
    text.write_text("not a tar")
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as out:
        member = tarfile.TarInfo("readme")
        member.size = 2
        out.addfile(member, io.BytesIO(b"hi"))
    assert archive_problem(tmp_path / "missing.tar") == f"{tmp_path / 'missing.tar'} does not exist"
    assert archive_problem(text) == f"{text} is not an image archive (not a tar file)"
    assert archive_problem(plain) == f"{plain} is a tar archive, but not of images (it has no manifest.json)"


@pytest.mark.parametrize("name", ["missing.tar", "notes.tar"])
def test_image_load_of_a_missing_or_wrong_file_exits_2_naming_it(fake: FakeBackend, tmp_path: Path,
                                                                  name: str) -> None:
    (tmp_path / "notes.tar").write_text("not a tar")
    result = invoke("image", "load", tmp_path / name)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {tmp_path / name} ")
    assert "hint: give an archive `hetero-emu image save` wrote" in result.stderr
    assert "images.load" not in fake.call_names()


def test_image_save_and_load_without_an_engine_exit_3(tmp_path: Path) -> None:
    """tests/unit points DOCKER_HOST at nothing. A load from a folder that holds no archive of the key
    is a miss, said without asking the engine (exit 0)."""
    assert invoke("image", "save", tmp_path).returncode == 3
    with tarfile.open(tmp_path / api.image_key().file_name, "w") as out:
        member = tarfile.TarInfo("manifest.json")
        member.size = 2
        out.addfile(member, io.BytesIO(b"[]"))
    assert invoke("image", "load", tmp_path).returncode == 3
    assert invoke("image", "load", tmp_path / "empty").returncode == 0


def test_the_cli_says_what_save_and_load_did(fake: FakeBackend, tmp_path: Path) -> None:
    key = api.image_key()
    saved = invoke("image", "save", tmp_path / "c")
    assert saved.returncode == 0
    assert saved.stdout.startswith(f"saved {DEFAULT_IMAGE} in {tmp_path / 'c' / key.file_name}")
    assert invoke("image", "save", tmp_path / "c").stdout.startswith(f"already saved: {DEFAULT_IMAGE}")
    loaded = json.loads(invoke("image", "load", tmp_path / "c", "--json").stdout)
    assert loaded["loaded"] == [DEFAULT_IMAGE] and loaded["up_to_date"] and loaded["key"] == key.text
    missed = invoke("image", "load", tmp_path / "elsewhere")
    assert missed.returncode == 0 and missed.stdout.strip() == f"not saved: {DEFAULT_IMAGE} (key {key.text})"
    assert fake_recipe_hash(DEFAULT_IMAGE) == fake.images.labels_of[DEFAULT_IMAGE][RECIPE_LABEL]
