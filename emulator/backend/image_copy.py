"""Copy an image into the engines of swarm nodes without a registry: `docker save` once from the
manager's engine into a file, then `docker load` of that file into every node that lacks it, in
parallel (what a user does by hand with `docker save | ssh node docker load`)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors
import requests

from emulator.backend.docker_http import EngineHttp
from emulator.defaults import default_cache_dir
from emulator.errors import EnvironmentProblem
from emulator.reports.console import Reporter

# Bytes per read of the saved image: large reads keep a 400 MB save to a few thousand calls.
CHUNK = 1 << 20
# A save or a load of a few hundred MB on a busy engine takes a while, and the engine may send nothing
# for longer than the client's default read timeout of 10 s (measured: a save timed out so with the
# machine's load average at 8).
LOAD_TIMEOUT = 900


def copy_image(source: docker.DockerClient, name: str, image_id: str,
               targets: Mapping[str, docker.DockerClient], reporter: Reporter) -> dict[str, float]:
    """Load image `name` (whose id is `image_id`) from `source` into every engine of `targets`
    (node hostname -> client); returns the seconds each node's load took. The image keeps its id,
    so a service that names the id finds it on every node."""
    folder = default_cache_dir() / "swarm"
    folder.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    with tempfile.NamedTemporaryFile(dir=folder, prefix="image-", suffix=".tar") as saved:
        with reporter.task(f"saving {name} for {len(targets)} node(s) that lack it"):
            try:
                # By name: the tag arrives too.
                response = EngineHttp(source.api).save_image(name, timeout=LOAD_TIMEOUT)
                for chunk in response.iter_content(chunk_size=CHUNK):
                    saved.write(chunk)
            except (docker.errors.APIError, requests.exceptions.RequestException) as err:
                raise EnvironmentProblem(f"cannot save {name} from the manager's engine: {err}") from None
            saved.flush()
        size = Path(saved.name).stat().st_size
        title = f"loading {name} ({size / 1e6:.0f} MB) into {', '.join(sorted(targets))}"
        with reporter.task(title, total=len(targets)) as loading:

            def load(node: str) -> None:
                began = time.monotonic()
                client = targets[node]
                try:
                    with open(saved.name, "rb") as data:
                        # docker-py reads the body from the file object as it sends it.
                        EngineHttp(client.api).load_image(data, timeout=LOAD_TIMEOUT)
                    client.images.get(image_id)
                except (docker.errors.APIError, requests.exceptions.RequestException, OSError) as err:
                    raise EnvironmentProblem(f"cannot load {name} into node {node}: {str(err)[:300]}",
                                             hint="check the node's disk and engine") from None
                seconds[node] = time.monotonic() - began
                loading.advance()

            with ThreadPoolExecutor(max_workers=len(targets)) as pool:
                for future in [pool.submit(load, node) for node in sorted(targets)]:
                    future.result()
    reporter.info("image copied: " + ", ".join(f"{node} {seconds[node]:.1f} s" for node in sorted(seconds)))
    return seconds
