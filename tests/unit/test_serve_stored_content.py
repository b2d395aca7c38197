"""What `hetero-emu serve` sends back of a stored object: the Content-Type it was stored with (S3
keeps it from PutObject, CreateMultipartUpload and CopyObject), and the headers that keep a browser
from running it on the server's origin, where the live page is (`Content-Security-Policy: sandbox`,
`X-Content-Type-Options: nosniff`): for GetObject, HeadObject, ranges and presigned URLs alike. A real
server process (tests/support/serving.py), real boto3 clients and plain HTTP for the presigned URLs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from serving import Server, running_server

from emulator.aws.s3 import DEFAULT_CONTENT_TYPE, MIN_PART

HTML = b"<html><body><script>document.title = 'ran'</script></body></html>"
INERT = {"content-security-policy": "sandbox", "x-content-type-options": "nosniff"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve-content")) as running:
        yield running


@pytest.fixture(scope="module")
def s3(server: Server) -> Any:
    client = server.client("s3", signature_version="s3v4")
    client.create_bucket(Bucket="stored", CreateBucketConfiguration={"LocationConstraint": server.region})
    return client


def inert(headers: Any) -> dict[str, str]:
    return {k: headers.get(k) for k in INERT}


def test_put_object_with_text_html_is_got_as_text_html_and_inert(s3: Any) -> None:
    s3.put_object(Bucket="stored", Key="page.html", Body=HTML, ContentType="text/html")
    got = s3.get_object(Bucket="stored", Key="page.html")
    head = s3.head_object(Bucket="stored", Key="page.html")
    ranged = s3.get_object(Bucket="stored", Key="page.html", Range="bytes=0-5")

    assert got["ContentType"] == head["ContentType"] == ranged["ContentType"] == "text/html"
    assert got["Body"].read() == HTML and ranged["Body"].read() == HTML[:6]
    for answer in (got, head, ranged):
        assert inert(answer["ResponseMetadata"]["HTTPHeaders"]) == INERT


def test_a_presigned_get_of_an_svg_is_inert_in_a_browser(s3: Any) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    s3.put_object(Bucket="stored", Key="picture.svg", Body=svg, ContentType="image/svg+xml")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "stored", "Key": "picture.svg"})
    got = requests.get(url, timeout=30)
    ranged = requests.get(url, headers={"Range": "bytes=1-3"}, timeout=30)

    assert got.status_code == 200 and got.content == svg
    assert got.headers["content-type"] == "image/svg+xml"
    assert inert(got.headers) == INERT
    assert ranged.status_code == 206 and ranged.content == svg[1:4] and inert(ranged.headers) == INERT


def test_an_object_stored_without_a_type_is_binary_octet_stream(s3: Any) -> None:
    s3.put_object(Bucket="stored", Key="plain", Body=b"x")
    assert s3.get_object(Bucket="stored", Key="plain")["ContentType"] == DEFAULT_CONTENT_TYPE == "binary/octet-stream"


def test_a_multipart_upload_keeps_the_type_it_was_created_with(s3: Any) -> None:
    upload = s3.create_multipart_upload(Bucket="stored", Key="big.json", ContentType="application/json")
    parts = []
    for number, data in ((1, b"a" * MIN_PART), (2, b"b" * 10)):
        done = s3.upload_part(Bucket="stored", Key="big.json", UploadId=upload["UploadId"], PartNumber=number,
                              Body=data)
        parts.append({"PartNumber": number, "ETag": done["ETag"]})
    s3.complete_multipart_upload(Bucket="stored", Key="big.json", UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": parts})
    assert s3.head_object(Bucket="stored", Key="big.json")["ContentType"] == "application/json"


def test_a_copy_keeps_the_sources_type_unless_it_replaces_it(s3: Any) -> None:
    s3.put_object(Bucket="stored", Key="source.css", Body=b"p {}", ContentType="text/css")
    s3.copy_object(Bucket="stored", Key="copy.css", CopySource={"Bucket": "stored", "Key": "source.css"})
    s3.copy_object(Bucket="stored", Key="replaced.css", CopySource={"Bucket": "stored", "Key": "source.css"},
                   MetadataDirective="REPLACE", ContentType="text/plain")

    assert s3.head_object(Bucket="stored", Key="copy.css")["ContentType"] == "text/css"
    assert s3.head_object(Bucket="stored", Key="replaced.css")["ContentType"] == "text/plain"


def test_a_file_rewritten_outside_s3_loses_the_type_of_the_upload_before(s3: Any, server: Server) -> None:
    s3.put_object(Bucket="stored", Key="report.html", Body=b"<p>first</p>", ContentType="text/html")
    (server.s3_root / "stored" / "report.html").write_bytes(b"something a job wrote, much longer than before")
    assert s3.head_object(Bucket="stored", Key="report.html")["ContentType"] == DEFAULT_CONTENT_TYPE


def test_a_put_without_a_type_replaces_the_type_of_the_object_before(s3: Any) -> None:
    s3.put_object(Bucket="stored", Key="again", Body=b"<b>x</b>", ContentType="text/html")
    s3.put_object(Bucket="stored", Key="again", Body=b"<b>x</b>")
    assert s3.head_object(Bucket="stored", Key="again")["ContentType"] == DEFAULT_CONTENT_TYPE
