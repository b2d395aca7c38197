"""The live page of `hetero-emu serve` in a real browser (Debian's chromium, driven by Selenium through
chromium-driver): the page is open before the job exists, a job is started through boto3, and the
page shows its hosts running, then ended with exit code 0, and a line the script printed, all without
a reload; the screenshot is not blank."""

from __future__ import annotations

import shutil
import struct
import textwrap
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from serving import running_server

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
SCRIPT = textwrap.dedent('''
    import json, os, time
    host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
    for i in range(8):
        print(f"{host} says step {i}", flush=True)
        time.sleep(1)
    print(f"{host} finished its steps", flush=True)
''')


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "Debian's chromium and chromium-driver are missing: scripts/setup.sh installs them"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1800"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def wait_for(condition: Any, what: str, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"the page never showed {what}")


def png_colours(data: bytes) -> int:
    """How many distinct pixel values a PNG (8-bit RGB or RGBA, as chromium writes) holds, sampled."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, kind = 8, b"", 0, 0
    while pos < len(data):
        length, tag = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if tag == b"IHDR":
            width, kind = struct.unpack(">I", chunk[:4])[0], chunk[9]
        elif tag == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    size = {2: 3, 6: 4}[kind]
    stride = width * size + 1
    # Filter bytes differ, but distinct rows of filtered bytes still say whether anything is drawn.
    return len({raw[row * stride + 1:(row + 1) * stride:97] for row in range(0, len(raw) // stride, 7)})


def test_the_page_follows_a_job_live_in_a_real_browser(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    with running_server(tmp_path / "server") as server:
        browser.get(server.url + "/")
        assert "hetero-emu" in browser.title
        clients = {service: boto3.client(service, endpoint_url=server.url, region_name=server.region,
                                          aws_access_key_id="emu", aws_secret_access_key="emu")
                   for service in ("s3", "sagemaker")}
        clients["s3"].create_bucket(Bucket="page", CreateBucketConfiguration={"LocationConstraint": server.region})
        clients["s3"].put_object(Bucket="page", Key="code/train.py", Body=SCRIPT.encode())
        clients["sagemaker"].create_training_job(
            TrainingJobName="seen-live", RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File",
                                    "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/train.py"]},
            InputDataConfig=[{"ChannelName": "code", "DataSource": {"S3DataSource": {
                "S3DataType": "S3Prefix", "S3Uri": "s3://page/code", "S3DataDistributionType": "FullyReplicated"}}}],
            OutputDataConfig={"S3OutputPath": "s3://page/output"},
            ResourceConfig={"VolumeSizeInGB": 30, "InstanceGroups": [
                {"InstanceGroupName": "head", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
                {"InstanceGroupName": "workers", "InstanceType": "ml.c5.2xlarge", "InstanceCount": 1}]},
            StoppingCondition={"MaxRuntimeInSeconds": 600})
        # The index, newest first, links to the job.
        wait_for(lambda: (browser.refresh() or browser.find_elements(By.LINK_TEXT, "seen-live")), "the job listed", 30)
        browser.find_element(By.LINK_TEXT, "seen-live").click()

        def state(host: str) -> str:
            cells = browser.find_elements(By.CSS_SELECTOR, f'#hosts tr[data-host="{host}"] td.state')
            return str(cells[0].text) if cells else ""

        def exit_code(host: str) -> str:
            cells = browser.find_elements(By.CSS_SELECTOR, f'#hosts tr[data-host="{host}"] td.exit')
            return str(cells[0].text) if cells else ""

        wait_for(lambda: state("algo-1") == "running" and state("algo-2") == "running", "both hosts running")
        wait_for(lambda: "algo-2 says step" in browser.find_element(By.ID, "logs").text, "a host's log line")
        wait_for(lambda: browser.find_element(By.ID, "status").text == "Completed", "the job completed")
        wait_for(lambda: all(exit_code(h) == "0" and state(h) == "completed" for h in ("algo-1", "algo-2")),
                 "both hosts completed with exit code 0", 30)
        assert "algo-1 finished its steps" in browser.find_element(By.ID, "logs").text
        bars = browser.find_elements(By.CSS_SELECTOR, "#timeline svg rect")
        assert bars, "no timeline bars"
        shot = browser.get_screenshot_as_png()
        (tmp_path / "page.png").write_bytes(shot)
        assert png_colours(shot) > 20, "the screenshot is blank"
