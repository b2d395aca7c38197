"""S3 and STS answered on a local S3 root, through a real boto3 session's clients and resources (their
parameter checks, s3transfer's multipart uploads and ranged downloads, botocore's exceptions): what
is stored where, listing order and pagination, the errors S3 gives, and the root's limits (no '..'
keys, no links out of the root)."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from emulator.aws import stub
from emulator.aws.s3 import MIN_PART, S3, UPLOADS
from emulator.aws.sts import STS

MiB = 1 << 20


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "s3").mkdir()
    return tmp_path / "s3"


@pytest.fixture
def session(root: Path) -> boto3.Session:
    made = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="us-west-2")
    stub.install(made, [S3(root, region="us-west-2"), STS()])
    return made


@pytest.fixture
def s3(session: boto3.Session) -> Any:
    client = session.client("s3")
    client.create_bucket(Bucket="bkt", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return client


def code(err: pytest.ExceptionInfo[ClientError]) -> str:
    return str(err.value.response["Error"]["Code"])


def test_put_get_round_trip_and_ranges(s3: Any, root: Path, session: boto3.Session) -> None:
    put = s3.put_object(Bucket="bkt", Key="dir/sub/hello.txt", Body=b"hello world", ContentType="text/plain",
                        ServerSideEncryption="AES256", ChecksumAlgorithm="SHA256", ExpectedBucketOwner="000000000000")
    assert put["ETag"] == f'"{hashlib.md5(b"hello world").hexdigest()}"'
    assert (root / "bkt" / "dir" / "sub" / "hello.txt").read_bytes() == b"hello world"
    assert not list((root / UPLOADS / "tmp").iterdir())  # the temporary file was renamed into place

    got = s3.get_object(Bucket="bkt", Key="dir/sub/hello.txt")
    assert got["Body"].read() == b"hello world"
    assert (got["ContentLength"], got["ETag"]) == (11, put["ETag"])
    assert got["LastModified"].tzinfo is not None

    part = s3.get_object(Bucket="bkt", Key="dir/sub/hello.txt", Range="bytes=6-100")
    assert part["Body"].read() == b"world"
    assert (part["ContentRange"], part["ContentLength"]) == ("bytes 6-10/11", 5)
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.get_object(Bucket="bkt", Key="dir/sub/hello.txt", Range="bytes=-3")["Body"].read() == b"rld"
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket="bkt", Key="dir/sub/hello.txt", Range="bytes=11-")
    assert code(err) == "InvalidRange"

    s3.put_object(Bucket="bkt", Key="text", Body="h\u00e9")
    with open(root / "bkt" / "dir" / "sub" / "hello.txt", "rb") as file:
        s3.put_object(Bucket="bkt", Key="from-file", Body=file)
    obj = session.resource("s3").Object("bkt", "text")
    assert obj.get()["Body"].read().decode() == "h\u00e9"
    assert obj.content_length == 3
    assert (root / "bkt" / "from-file").read_bytes() == b"hello world"

    head = s3.head_object(Bucket="bkt", Key="dir/sub/hello.txt")
    assert (head["ContentLength"], head["ETag"]) == (11, put["ETag"])
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket="bkt", Key="dir/sub/hello.txt", IfMatch='"0123"')
    assert code(err) == "PreconditionFailed"
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket="bkt", Key="dir/sub/hello.txt", IfNoneMatch=put["ETag"])
    assert code(err) == "304"
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket="bkt", Key="text", Body=b"again", IfNoneMatch="*")
    assert code(err) == "PreconditionFailed"


def test_upload_and_download_a_20_mb_file_in_parts(session: boto3.Session, s3: Any, root: Path,
                                                   tmp_path: Path) -> None:
    data = os.urandom(64 * 1024) * 320  # 20 MiB
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    config = TransferConfig(multipart_threshold=MIN_PART, multipart_chunksize=MIN_PART)
    seen: list[int] = []
    s3.upload_file(str(source), "bkt", "models/big.bin", Config=config, Callback=seen.append)
    assert (root / "bkt" / "models" / "big.bin").read_bytes() == data
    assert sum(seen) == len(data)  # s3transfer's progress callbacks see every byte
    assert not [p for p in (root / UPLOADS).iterdir() if p.name != "tmp"]  # the parts are gone

    head = s3.head_object(Bucket="bkt", Key="models/big.bin")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-3"')
    target = tmp_path / "back.bin"
    session.resource("s3").Bucket("bkt").download_file("models/big.bin", str(target), Config=config)
    assert target.read_bytes() == data

    copied = s3.copy_object(Bucket="bkt", Key="copy.bin", CopySource={"Bucket": "bkt", "Key": "models/big.bin"})
    assert copied["CopyObjectResult"]["ETag"]
    assert (root / "bkt" / "copy.bin").read_bytes() == data


def test_multipart_rules(s3: Any, root: Path) -> None:
    upload = s3.create_multipart_upload(Bucket="bkt", Key="parts.bin")["UploadId"]
    one = s3.upload_part(Bucket="bkt", Key="parts.bin", UploadId=upload, PartNumber=1, Body=b"small")["ETag"]
    two = s3.upload_part(Bucket="bkt", Key="parts.bin", UploadId=upload, PartNumber=2, Body=b"last")["ETag"]
    parts = [{"PartNumber": 1, "ETag": one}, {"PartNumber": 2, "ETag": two}]
    with pytest.raises(ClientError) as err:
        s3.complete_multipart_upload(Bucket="bkt", Key="parts.bin", UploadId=upload, MultipartUpload={"Parts": parts})
    assert code(err) == "EntityTooSmall"
    with pytest.raises(ClientError) as err:
        s3.complete_multipart_upload(Bucket="bkt", Key="parts.bin", UploadId=upload,
                                     MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": one}]})
    assert code(err) == "InvalidPart"
    done = s3.complete_multipart_upload(Bucket="bkt", Key="parts.bin", UploadId=upload,
                                        MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": two}]})
    assert done["ETag"] == f'"{hashlib.md5(b"last").hexdigest()}"'
    assert (root / "bkt" / "parts.bin").read_bytes() == b"last"
    with pytest.raises(s3.exceptions.NoSuchUpload):
        s3.abort_multipart_upload(Bucket="bkt", Key="parts.bin", UploadId=upload)


def test_listing_order_delimiter_and_pagination(s3: Any, root: Path, session: boto3.Session) -> None:
    keys = ["a/1", "a/2", "a-c", "a0", "b/x/y", "c", "d e+f%20", "\u00e9t\u00e9"]
    for key in keys:
        s3.put_object(Bucket="bkt", Key=key, Body=key.encode())
    (root / "bkt" / "empty" / "deeper").mkdir(parents=True)  # a folder with no file is no prefix

    listed = s3.list_objects_v2(Bucket="bkt")
    assert [c["Key"] for c in listed["Contents"]] == sorted(keys, key=lambda k: k.encode())
    assert listed["KeyCount"] == len(keys) and listed["IsTruncated"] is False

    paginator = s3.get_paginator("list_objects_v2")
    pages = list(paginator.paginate(Bucket="bkt", Delimiter="/", PaginationConfig={"PageSize": 2}))
    assert len(pages) == 4 and all(page["KeyCount"] <= 2 for page in pages)
    assert [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", [])] == ["a/", "b/"]
    assert [c["Key"] for page in pages for c in page.get("Contents", [])] == ["a-c", "a0", "c", "d e+f%20",
                                                                              "\u00e9t\u00e9"]

    under = s3.list_objects_v2(Bucket="bkt", Prefix="b/", Delimiter="/")
    assert under["CommonPrefixes"] == [{"Prefix": "b/x/"}] and "Contents" not in under
    after = s3.list_objects_v2(Bucket="bkt", StartAfter="a0", MaxKeys=1)
    assert [c["Key"] for c in after["Contents"]] == ["b/x/y"] and after["IsTruncated"]

    bucket = session.resource("s3").Bucket("bkt")  # ListObjects (v1) through the resource's collection
    assert [o.key for o in bucket.objects.filter(Prefix="a")] == ["a-c", "a/1", "a/2", "a0"]
    v1 = s3.list_objects(Bucket="bkt", Delimiter="/", MaxKeys=2)
    assert [c["Key"] for c in v1["Contents"]] == ["a-c"] and v1["CommonPrefixes"] == [{"Prefix": "a/"}]
    assert v1["NextMarker"] == "a/"
    assert s3.list_objects(Bucket="bkt", Delimiter="/", Marker="a/", MaxKeys=1)["Contents"][0]["Key"] == "a0"


def test_delete_copy_and_prune(s3: Any, root: Path) -> None:
    s3.put_object(Bucket="bkt", Key="x/y/z", Body=b"1")
    s3.put_object(Bucket="bkt", Key="x/keep", Body=b"2")
    s3.copy_object(Bucket="bkt", Key="x/y/copy", CopySource="bkt/x/y/z")
    assert (root / "bkt" / "x" / "y" / "copy").read_bytes() == b"1"
    s3.delete_object(Bucket="bkt", Key="x/y/z")
    s3.delete_object(Bucket="bkt", Key="never/there")  # no error, as on S3
    answer = s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": "x/y/copy"}, {"Key": "x/../y"}]})
    assert answer["Deleted"] == [{"Key": "x/y/copy"}]
    assert [e["Code"] for e in answer["Errors"]] == ["InvalidArgument"]
    assert not (root / "bkt" / "x" / "y").exists() and (root / "bkt" / "x" / "keep").exists()

    s3.put_object(Bucket="bkt", Key="marker/", Body=b"")  # a console "folder": a folder, not a key
    assert (root / "bkt" / "marker").is_dir()
    assert [c["Key"] for c in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["x/keep"]
    s3.delete_object(Bucket="bkt", Key="marker/")
    assert not (root / "bkt" / "marker").exists()


def test_a_bucket_on_another_filesystem_is_written_through_a_copy_beside_the_key(
        s3: Any, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    replace = os.replace

    def across(source: str, target: str) -> None:
        if UPLOADS in source:  # as a rename from the root's temporary folder to another mount fails
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        replace(source, target)

    monkeypatch.setattr(os, "replace", across)
    s3.put_object(Bucket="bkt", Key="k", Body=b"data")
    assert (root / "bkt" / "k").read_bytes() == b"data"
    assert [p.name for p in (root / "bkt").iterdir()] == ["k"]
    assert not list((root / UPLOADS / "tmp").iterdir())


def test_errors_as_s3_gives_them(s3: Any, session: boto3.Session) -> None:
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket="bkt", Key="missing")
    assert (code(err), err.value.response["Error"]["Message"]) == ("404", "Not Found")
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="bkt", Key="missing")
    with pytest.raises(s3.exceptions.NoSuchBucket):
        s3.list_objects_v2(Bucket="no-such-bucket")
    with pytest.raises(ClientError) as err:
        s3.head_bucket(Bucket="no-such-bucket")
    assert (code(err), err.value.response["Error"]["Message"]) == ("404", "Not Found")
    with pytest.raises(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket="bkt", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    with pytest.raises(ClientError) as err:
        s3.create_bucket(Bucket="192.168.1.1")
    assert code(err) == "InvalidBucketName"
    for key in ("a/../b", "..", "./a", "a//b"):
        with pytest.raises(ClientError) as err:
            s3.put_object(Bucket="bkt", Key=key, Body=b"x")
        assert code(err) == "InvalidArgument" and "local S3 root" in str(err.value)
    assert session.resource("s3").Bucket("no-such-bucket").creation_date is None
    assert s3.get_bucket_location(Bucket="bkt")["LocationConstraint"] == "us-west-2"


def test_links_out_of_the_root_are_not_objects(s3: Any, root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("outside")
    (root / "bkt" / "leak").symlink_to(tmp_path / "secret.txt")
    (root / "bkt" / "leakdir").symlink_to(tmp_path, target_is_directory=True)
    s3.put_object(Bucket="bkt", Key="real.txt", Body=b"inside")
    (root / "bkt" / "alias.txt").symlink_to(root / "bkt" / "real.txt")

    assert [c["Key"] for c in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["alias.txt", "real.txt"]
    assert s3.get_object(Bucket="bkt", Key="alias.txt")["Body"].read() == b"inside"
    for key in ("leak", "leakdir/secret.txt"):
        with pytest.raises(ClientError) as err:
            s3.get_object(Bucket="bkt", Key=key)
        assert code(err) == "AccessDenied"
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket="bkt", Key="leakdir/new.txt", Body=b"x")
    assert code(err) == "AccessDenied" and not (tmp_path / "new.txt").exists()


def test_list_buckets_shows_bucket_folders_only(s3: Any, root: Path) -> None:
    s3.create_multipart_upload(Bucket="bkt", Key="pending")  # makes the hidden uploads folder
    (root / "Not_A_Bucket").mkdir()
    (root / "file-not-bucket").write_text("x")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert (root / UPLOADS).is_dir() and names == ["bkt"]


def test_sts_caller_identity(session: boto3.Session) -> None:
    identity = session.client("sts").get_caller_identity()
    assert (identity["Account"], identity["Arn"], identity["UserId"]) == (
        "000000000000", "arn:aws:iam::000000000000:user/hetero-emu", "hetero-emu")


def test_an_operation_not_emulated_is_refused_by_name(s3: Any) -> None:
    with pytest.raises(ClientError) as err:
        s3.get_bucket_policy(Bucket="bkt")
    assert code(err) == "NotEmulated" and "s3:GetBucketPolicy" in str(err.value)
