"""S3 answered locally on the S3 root (`emulator.jobspec.s3`): bucket `b` is the folder `<root>/b`, the
object `b/k` is the file `<root>/b/k`. What the SageMaker SDK, boto3's resources and s3transfer
(upload_file / download_file / copy) call is answered, in the API's shapes and with its errors:
ListBuckets, HeadBucket, CreateBucket, GetBucketLocation, PutObject, GetObject (ranges),
HeadObject, CopyObject, DeleteObject(s), ListObjects(V2) and multipart uploads (UploadPart,
UploadPartCopy).

The root's rules hold: a key with '.', '..' or empty parts or a NUL is refused (it has no place under
its bucket's folder, or would name the file another key names), and nothing outside the root is read
or written: a link leading out of it is refused when named and skipped when listed. A folder is not
an object, only files are; a folder without files in it lists as nothing, as an S3 "folder" with no
keys under it does not exist.

Writes land whole or not at all: the body goes to a temporary file in `<root>/.hetero-emu-uploads`
(next to the buckets, never listed: a bucket name cannot start with '.'), then is renamed over the
key's file, so a reader sees the old object or the new one. Multipart uploads keep their parts there
until they are completed or aborted.

ETags: an object under 8 MiB (s3transfer's multipart threshold) has the quoted MD5 of its content, as
a single PUT gets from S3. A larger one gets a multipart-style ETag (`"<hex>-<parts>"`) made from the
file's identity, size and modification time, not its content: hashing every large file would make
each listing and download read the data once more, and on S3 an object that size uploaded by
s3transfer has a multipart ETag that is no content MD5 either. Both change when the file changes,
which is what s3transfer's `IfMatch` on ranged downloads needs.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import errno
import hashlib
import http.client
import io
import ipaddress
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from email.utils import formatdate
from itertools import islice
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, unquote

from botocore.response import StreamingBody
from botocore.utils import parse_timestamp

from emulator.aws.stub import ApiError, Operation, Service
from emulator.jobspec.s3 import BUCKET_PATTERN
from emulator.jobspec.wording import preview

log = logging.getLogger(__name__)

UPLOADS = ".hetero-emu-uploads"  # under the root, beside the buckets
TEMP_PREFIX = ".hetero-emu-"  # a temporary file inside a bucket's folder (never listed)
CHUNK = 1 << 20
MD5_LIMIT = 8 << 20  # s3transfer's default multipart_threshold; see the module docstring
MIN_PART = 5 << 20  # the service's smallest part but the last
MAX_PART_NUMBER = 10_000
MAX_PUT = 5 << 30  # the service's largest single PUT (and part)
MAX_KEYS = 1000
MAX_KEY_BYTES = 1024
NAME_MAX = 255  # a file name's longest on common filesystems: a longer key part cannot be a file
DEFAULT_CONTENT_TYPE = "binary/octet-stream"  # what S3 stores when a PUT names no type
OWNER = {"DisplayName": "hetero-emu", "ID": "0" * 64}
HEAD_OPERATIONS = frozenset({"HeadObject", "HeadBucket"})
RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# A Content-Type kept for an object: printable text of a header's length, no line breaks (a value
# given in-process, not through an HTTP parser, is checked here before `serve` sends it as a header).
_HEADER_TEXT = re.compile(r"[\x20-\x7e\u0080-\uffff]{1,1024}")
TYPES = "types"  # under UPLOADS: the objects' Content-Types
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
_PART_FILE = re.compile(r"(\d{5})\.([0-9a-f]{32})")

# (entry, file path, stat): a key and its file, or a common prefix (path and stat None).
Entry = tuple[str, str | None, os.stat_result | None]


def _umask() -> int:
    # Temporary files are made 0600; objects get the permissions any new file of this process would.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


def bucket_name_problem(name: object) -> str | None:
    """Why `name` cannot be a bucket's name by the service's rules, or None."""
    if not isinstance(name, str) or not BUCKET_PATTERN.fullmatch(name):
        return ("a bucket name is 3-63 lowercase letters, digits, '.' and '-', beginning and ending with a letter "
                "or digit")
    if ".." in name:
        return "a bucket name has no two adjacent periods"
    with contextlib.suppress(ValueError):
        ipaddress.IPv4Address(name)
        return "a bucket name is not formatted as an IP address"
    if name.startswith(RESERVED_PREFIXES) or name.endswith(RESERVED_SUFFIXES):
        return "a bucket name does not start with 'xn--', 'sthree-' or 'amzn-s3-demo-' and does not end with " \
               "'-s3alias', '--ol-s3', '.mrap', '--x-s3' or '--table-s3'"
    return None


def key_parts(key: object) -> list[str]:
    """The parts of a key as folders and file under its bucket's folder. A key ending in '/' (a
    console "folder") has '' as its last part."""
    if not isinstance(key, str) or not key:
        raise ApiError("InvalidArgument", "An object key is a non-empty string")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise ApiError("KeyTooLongError", "Your key is too long (at most 1024 bytes of UTF-8)")
    parts = key.split("/")
    if "\0" in key or any(part in (".", "..") for part in parts):
        raise ApiError("InvalidArgument", f"The key {preview(key)} has no place under the local S3 root: a key with "
                       "'.' or '..' parts or a NUL would leave its bucket's folder")
    if "" in parts[:-1]:
        raise ApiError("InvalidArgument", f"The key {preview(key)} has an empty part (a leading '/' or '//'): on the "
                       "local S3 root it would name the same file as the key without it")
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in parts):
        raise ApiError("InvalidArgument", f"The key {preview(key)} has a part longer than {NAME_MAX} bytes, which "
                       "cannot be a file or folder name on the local S3 root")
    return parts


def _no_such_key(key: object) -> ApiError:
    return ApiError("NoSuchKey", f"The specified key does not exist: {preview(key)}", 404)


def _bare(status: int) -> ApiError:
    """An error S3 answers with a status and no body (HEAD requests, 304): botocore names it by its
    status code and reason, as SDK code compares them (`code == "404" and message == "Not Found"`)."""
    return ApiError(str(status), http.client.responses[status], status)


def _metadata(status: int, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"HTTPStatusCode": status, "HTTPHeaders": dict(headers or {}), "RetryAttempts": 0}


def _when(seconds: float, *, precision: str = "seconds") -> datetime:
    stamp = datetime.fromtimestamp(seconds, timezone.utc)
    if precision == "seconds":  # HTTP dates (GetObject, HeadObject) carry whole seconds
        return stamp.replace(microsecond=0)
    return stamp.replace(microsecond=stamp.microsecond // 1000 * 1000)  # listings carry milliseconds


def _as_datetime(value: object) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    stamp: datetime = parse_timestamp(value)
    return stamp


def _chunks(body: object) -> Iterator[bytes]:
    """A PutObject / UploadPart body (bytes, text, or a file-like object such as s3transfer's
    ReadFileChunk) in pieces of at most CHUNK bytes."""
    if body is None:
        return
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        view = memoryview(body)
        for start in range(0, len(view), CHUNK):
            yield bytes(view[start:start + CHUNK])
        return
    read = getattr(body, "read", None)
    if read is None:
        raise ApiError("InvalidArgument", f"A body is bytes, text or a readable file object, not {type(body).__name__}")
    # s3transfer's ReadFileChunk reports progress only once botocore signals the request is on the
    # wire (at request-created, which a locally answered call never reaches).
    signal = getattr(body, "signal_transferring", None)
    if callable(signal):
        signal()
    while True:
        chunk = read(CHUNK)
        if not chunk:
            return
        yield chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)


class _Window(io.RawIOBase):
    """`length` bytes of an open file from its position: a ranged GetObject's body."""

    def __init__(self, file: io.BufferedReader, length: int) -> None:
        super().__init__()
        self._file = file
        self._left = length

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        # StreamingBody reads with None for "all", which RawIOBase's own read refuses.
        count = self._left if size is None or size < 0 else min(size, self._left)
        data = self._file.read(count) if count > 0 else b""
        self._left -= len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        count = min(len(buffer), self._left)
        if count <= 0:
            return 0
        got = self._file.readinto(memoryview(buffer)[:count])
        self._left -= got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


def _byte_range(text: object, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a `Range: bytes=a-b` header on an object of `size` bytes; None for the
    whole object (no header, or one S3 ignores: not one byte range)."""
    match = _RANGE.fullmatch(text) if isinstance(text, str) else None
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # bytes=-n: the last n bytes
        count = int(last)
        if count == 0 or size == 0:
            raise _invalid_range(size)
        return max(size - count, 0), size - 1
    if last != "" and int(last) < int(first):
        return None
    if int(first) >= size:
        raise _invalid_range(size)
    return int(first), min(int(last), size - 1) if last else size - 1


def _invalid_range(size: int) -> ApiError:
    return ApiError("InvalidRange", f"The requested range is not satisfiable (the object is {size} bytes)", 416)


def _etags(value: object) -> set[str]:
    return {part.strip().strip('"') for part in str(value).split(",")}


def _url(value: str, encode: bool) -> str:
    return quote_plus(value, safe="/") if encode else value


def _rollup(key: str, prefix: str, delimiter: str) -> str | None:
    """The common prefix `key` lists under (up to the first delimiter after the prefix), or None."""
    if not delimiter or not key.startswith(prefix):
        return None
    at = key.find(delimiter, len(prefix))
    return key[:at + len(delimiter)] if at >= 0 else None


def _token(entry: str) -> str:
    return base64.urlsafe_b64encode(entry.encode("utf-8")).decode("ascii")


def _untoken(token: object) -> str:
    try:
        return base64.urlsafe_b64decode(str(token).encode("ascii")).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        raise ApiError("InvalidArgument", "The continuation token provided is incorrect") from None


def _copy_source(source: object) -> dict[str, str]:
    """Bucket and Key of CopySource: botocore has made it `bucket/key` with the key percent-encoded
    (and maybe `?versionId=`) before the call reaches here; a dict is taken as given."""
    if isinstance(source, Mapping):
        return {"Bucket": str(source.get("Bucket")), "Key": str(source.get("Key"))}
    text = str(source).split("?versionId=", 1)[0]
    bucket, _, key = unquote(text).lstrip("/").partition("/")
    return {"Bucket": bucket, "Key": key}


def _answering(name: str, operation: Operation) -> Operation:
    """`operation` with the local filesystem's failures as S3 errors, and HEAD errors without a body
    (as botocore parses them from S3: the status as the code)."""

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        try:
            try:
                return operation(params)
            except PermissionError as err:
                log.warning("%s: the local S3 root refused it: %s", name, err)
                raise ApiError("AccessDenied", f"Access Denied: the local S3 root refused it ({err.strerror})",
                               403) from None
            except OSError as err:
                # The file's path stays in the log of whoever runs the root: S3's messages name buckets
                # and keys, and `serve` answers clients who need not know where the root lies.
                log.warning("%s: the local S3 root failed: %s", name, err)
                raise ApiError("InternalError", "We encountered an internal error. Please try again. (The local "
                               f"S3 root failed: {err.strerror or type(err).__name__}.)", 500) from None
        except ApiError as err:
            if name not in HEAD_OPERATIONS:
                raise
            if err.status == 400:  # keeps the reason: nothing in SDK code compares a 400's message
                raise ApiError("400", err.message, 400) from None
            raise _bare(err.status) from None

    return answer


class S3(Service):
    """Buckets and objects on the local S3 root `root`. `region` is where the buckets say they are
    (GetBucketLocation, HeadBucket)."""

    name = "s3"

    def __init__(self, root: Path, *, region: str = "us-east-1") -> None:
        self.root = Path(root).absolute()
        self.region = region
        # ETags of small files by (device, inode, size, mtime): a file is hashed once while it is unchanged.
        self._md5s: dict[tuple[int, int, int, int], str] = {}

    def operations(self) -> Mapping[str, Operation]:
        own: dict[str, Operation] = {
            "ListBuckets": self.list_buckets, "HeadBucket": self.head_bucket, "CreateBucket": self.create_bucket,
            "GetBucketLocation": self.get_bucket_location,
            "PutObject": self.put_object, "GetObject": self.get_object, "HeadObject": self.head_object,
            "CopyObject": self.copy_object, "DeleteObject": self.delete_object, "DeleteObjects": self.delete_objects,
            "ListObjects": self.list_objects, "ListObjectsV2": self.list_objects_v2,
            "CreateMultipartUpload": self.create_multipart_upload, "UploadPart": self.upload_part,
            "UploadPartCopy": self.upload_part_copy, "CompleteMultipartUpload": self.complete_multipart_upload,
            "AbortMultipartUpload": self.abort_multipart_upload,
        }
        return {name: _answering(name, operation) for name, operation in own.items()}

    # ----------------------------------------------------------------------------------------------
    # buckets

    def list_buckets(self, params: dict[str, Any]) -> dict[str, Any]:
        top = self._top()
        prefix = params.get("Prefix") or ""
        buckets = []
        try:
            with os.scandir(self.root) as listing:
                names = sorted(entry.name for entry in listing)
        except FileNotFoundError:
            names = []
        for name in names:
            if not name.startswith(prefix) or bucket_name_problem(name):  # '.hetero-emu-uploads' is no bucket name
                continue
            folder = os.path.join(self.root, name)
            if os.path.isdir(folder) and self._inside(os.path.realpath(folder), top):
                created = _when(os.stat(folder).st_mtime)
                buckets.append({"Name": name, "CreationDate": created, "BucketRegion": self.region})
        answer: dict[str, Any] = {"Buckets": buckets, "Owner": OWNER}
        if prefix:
            answer["Prefix"] = prefix
        return answer

    def head_bucket(self, params: dict[str, Any]) -> dict[str, Any]:
        self._bucket(params)
        return {"BucketRegion": self.region, "AccessPointAlias": False}

    def get_bucket_location(self, params: dict[str, Any]) -> dict[str, Any]:
        self._bucket(params)
        return {"LocationConstraint": None if self.region == "us-east-1" else self.region}

    def create_bucket(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("Bucket")
        problem = bucket_name_problem(name)
        if problem is not None:
            raise ApiError("InvalidBucketName", f"The specified bucket is not valid: {preview(name)}: {problem}")
        folder = os.path.join(self.root, str(name))
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise ApiError("BucketAlreadyExists", f"The requested bucket name is not available: {name} is a file "
                           "on the local S3 root, not a folder", 409)
        os.makedirs(self.root, exist_ok=True)
        try:
            os.mkdir(folder)
        except FileExistsError:
            raise ApiError("BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded "
                           f"and you already own it ({name})", 409) from None
        return {"Location": f"/{name}"}

    # ----------------------------------------------------------------------------------------------
    # objects

    def head_object(self, params: dict[str, Any]) -> dict[str, Any]:
        path, status = self._object(params)
        etag = self._etag(path, status)
        _preconditions(params, etag, status)
        window = _byte_range(params.get("Range"), status.st_size)
        return self._described(status, etag, window, self._content_type(path, status))

    def get_object(self, params: dict[str, Any]) -> dict[str, Any]:
        path, _ = self._object(params)
        file = open(path, "rb")  # noqa: SIM115 - the answer's StreamingBody owns it
        try:
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise _no_such_key(params.get("Key"))
            etag = self._etag(path, status)
            _preconditions(params, etag, status)
            window = _byte_range(params.get("Range"), status.st_size)
        except BaseException:
            file.close()
            raise
        answer = self._described(status, etag, window, self._content_type(path, status))
        if window is None:
            answer["Body"] = StreamingBody(file, status.st_size)
        else:
            file.seek(window[0])
            answer["Body"] = StreamingBody(_Window(file, answer["ContentLength"]), answer["ContentLength"])
        return answer

    def put_object(self, params: dict[str, Any]) -> dict[str, Any]:
        bucket = self._bucket(params)
        parts = key_parts(params.get("Key"))
        if parts[-1] == "":
            return self._put_folder(bucket, parts, params)
        if params.get("IfMatch") is not None:  # the object must exist and still be the one the caller saw
            wanted = _etags(params["IfMatch"])
            if self._etag(*self._object(params)).strip('"') not in wanted and "*" not in wanted:
                raise _precondition_failed()
        temp, digest = self._receive_body(params)
        target, etag = self._store(temp, bucket, parts, digest, exclusive=params.get("IfNoneMatch") == "*")
        self._keep_content_type(target, params.get("ContentType"))
        return {"ETag": etag}

    def copy_object(self, params: dict[str, Any]) -> dict[str, Any]:
        source = _copy_source(params.get("CopySource"))
        source_path, source_status = self._object(source)
        bucket = self._bucket(params)
        parts = key_parts(params.get("Key"))
        if parts[-1] == "":
            raise ApiError("InvalidArgument", "A key ending in '/' is a folder on the local S3 root, not an object")
        same = os.path.realpath(os.path.join(bucket, *parts)) == source_path
        if same and params.get("MetadataDirective") != "REPLACE":
            raise ApiError("InvalidRequest", "This copy request is illegal because it is trying to copy an object to "
                           "itself without changing the object's metadata, storage class, website redirect location "
                           "or encryption attributes.")
        # The copy keeps the source's Content-Type unless the request replaces its metadata (CopyObject,
        # x-amz-metadata-directive: https://docs.aws.amazon.com/AmazonS3/latest/API/API_CopyObject.html).
        kind = params.get("ContentType") if params.get("MetadataDirective") == "REPLACE" else \
            self._content_type(source_path, source_status)
        with open(source_path, "rb") as file:
            temp, digest, _ = self._receive(_chunks(file))
        target, etag = self._store(temp, bucket, parts, digest)
        self._keep_content_type(target, kind)
        return {"CopyObjectResult": {"ETag": etag, "LastModified": _when(os.stat(target).st_mtime)}}

    def delete_object(self, params: dict[str, Any]) -> dict[str, Any]:
        self._remove(self._bucket(params), params.get("Key"))
        return {"ResponseMetadata": _metadata(204)}

    def delete_objects(self, params: dict[str, Any]) -> dict[str, Any]:
        bucket = self._bucket(params)
        delete = params.get("Delete") or {}
        objects = delete.get("Objects") or []
        if len(objects) > 1000:
            raise ApiError("MalformedXML", "The XML you provided was not well-formed or did not validate against our "
                           "published schema (at most 1000 objects per DeleteObjects)")
        deleted, errors = [], []
        for item in objects:
            key = item.get("Key")
            try:
                self._remove(bucket, key)
            except ApiError as err:
                errors.append({"Key": key, "Code": err.code, "Message": err.message})
            else:
                deleted.append({"Key": key})
        answer: dict[str, Any] = {"Errors": errors} if errors else {}
        if not delete.get("Quiet") and deleted:
            answer["Deleted"] = deleted
        return answer

    # ----------------------------------------------------------------------------------------------
    # listing

    def list_objects_v2(self, params: dict[str, Any]) -> dict[str, Any]:
        token = params.get("ContinuationToken")
        after = _untoken(token) if token is not None else params.get("StartAfter") or ""
        bucket, page, truncated = self._list(params, after)
        encode = params.get("EncodingType") == "url"
        answer = self._page(params, page, truncated, encode, owner=bool(params.get("FetchOwner")))
        answer["KeyCount"] = len(page)
        if token is not None:
            answer["ContinuationToken"] = token
        if params.get("StartAfter"):
            answer["StartAfter"] = _url(params["StartAfter"], encode)
        if truncated:
            answer["NextContinuationToken"] = _token(page[-1][0])
        return answer

    def list_objects(self, params: dict[str, Any]) -> dict[str, Any]:
        bucket, page, truncated = self._list(params, params.get("Marker") or "")
        encode = params.get("EncodingType") == "url"
        answer = self._page(params, page, truncated, encode, owner=True)
        answer["Marker"] = _url(params.get("Marker") or "", encode)
        if truncated and params.get("Delimiter"):  # as S3: without a delimiter the last key is the marker
            answer["NextMarker"] = _url(page[-1][0], encode)
        return answer

    def _list(self, params: dict[str, Any], after: str) -> tuple[str, list[Entry], bool]:
        bucket = self._bucket(params)
        max_keys = min(max(int(params.get("MaxKeys", MAX_KEYS)), 0), MAX_KEYS)
        entries = self._listing(bucket, params.get("Prefix") or "", params.get("Delimiter") or "", after)
        page = list(islice(entries, max_keys))
        truncated = max_keys > 0 and next(entries, None) is not None
        return bucket, page, truncated

    def _page(self, params: dict[str, Any], page: list[Entry], truncated: bool, encode: bool,
              owner: bool) -> dict[str, Any]:
        contents, prefixes = [], []
        for entry, path, status in page:
            if path is None or status is None:
                prefixes.append({"Prefix": _url(entry, encode)})
                continue
            item = {"Key": _url(entry, encode), "LastModified": _when(status.st_mtime, precision="milliseconds"),
                    "ETag": self._etag(path, status), "Size": status.st_size, "StorageClass": "STANDARD"}
            if owner:
                item["Owner"] = OWNER
            contents.append(item)
        answer: dict[str, Any] = {"IsTruncated": truncated, "Name": params.get("Bucket"),
                                  "Prefix": _url(params.get("Prefix") or "", encode),
                                  "MaxKeys": min(max(int(params.get("MaxKeys", MAX_KEYS)), 0), MAX_KEYS)}
        if contents:
            answer["Contents"] = contents
        if params.get("Delimiter"):
            answer["Delimiter"] = _url(params["Delimiter"], encode)
        if prefixes:
            answer["CommonPrefixes"] = prefixes
        if encode:
            answer["EncodingType"] = "url"
        return answer

    def _listing(self, bucket: str, prefix: str, delimiter: str, after: str) -> Iterator[Entry]:
        """The bucket's keys and common prefixes in S3's order (UTF-8 bytes, which is code point
        order), those after `after` only, found without walking folders that cannot hold them."""
        top = self._top()
        root = os.stat(bucket)
        last = None
        for entry in self._walk(bucket, "", frozenset({(root.st_dev, root.st_ino)}), top, prefix, delimiter, after):
            if entry[0] != last:  # the files under one common prefix come one after another
                last = entry[0]
                yield entry

    def _walk(self, folder: str, base: str, above: frozenset[tuple[int, int]], top: str, prefix: str,
              delimiter: str, after: str) -> Iterator[Entry]:
        # Children sort by name, a folder's name with its '/': then every key under one child sorts
        # before every key under the next, so a depth-first walk yields keys in order, and the walk
        # can start at the first child that can hold a key past `after` and inside `prefix` (a
        # resumed page does not look at the files of the pages before it).
        children = self._children(folder)
        parts = [part for part, _ in children]
        start = 0
        for bound in (after, prefix):
            if bound.startswith(base):
                rest = bound[len(base):]
                cut = rest.find("/")
                start = max(start, bisect.bisect_left(parts, rest[:cut + 1] if cut >= 0 else rest))
        for part, entry in children[start:]:
            key = base + part
            if not (key.startswith(prefix) or prefix.startswith(key)):
                if key > prefix:  # past every key with the prefix: they sort together
                    break
                continue
            status = self._status(entry, top)
            if status is None:
                continue
            if not part.endswith("/"):
                if not stat.S_ISREG(status.st_mode) or not key.startswith(prefix):
                    continue
                rolled = _rollup(key, prefix, delimiter)
                if rolled is not None:
                    if rolled > after:
                        yield rolled, None, None
                elif key > after:
                    yield key, entry.path, status
                continue
            identity = (status.st_dev, status.st_ino)
            if not stat.S_ISDIR(status.st_mode) or identity in above:  # changed meanwhile; a link to a folder above
                continue
            rolled = _rollup(key, prefix, delimiter)
            if rolled is not None:  # everything under it lists as this one prefix, if anything does
                if rolled > after and self._has_file(entry.path, above | {identity}, top):
                    yield rolled, None, None
            elif key >= after or after.startswith(key):
                yield from self._walk(entry.path, key, above | {identity}, top, prefix, delimiter, after)

    def _has_file(self, folder: str, above: frozenset[tuple[int, int]], top: str) -> bool:
        stack = [(folder, above)]
        while stack:
            where, seen = stack.pop()
            for _, entry in self._children(where):
                status = self._status(entry, top)
                if status is None:
                    continue
                if stat.S_ISREG(status.st_mode):
                    return True
                identity = (status.st_dev, status.st_ino)
                if identity not in seen:
                    stack.append((entry.path, seen | {identity}))
        return False

    @staticmethod
    def _children(folder: str) -> list[tuple[str, os.DirEntry[str]]]:
        """The entries of `folder` that can be parts of keys, each with its part of a key (a folder's
        name ends in '/'), sorted as keys sort. Nothing is stat'ed but links: a listing skips most
        entries of a large folder."""
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:  # an unreadable folder holds no keys that can be read
            return []
        children = [(entry.name + "/" if entry.is_dir() else entry.name, entry) for entry in entries
                    if not entry.name.startswith(TEMP_PREFIX) and _is_utf8(entry.name)]
        children.sort(key=lambda child: child[0])
        return children

    def _status(self, entry: os.DirEntry[str], top: str) -> os.stat_result | None:
        """A file's or folder's status, links followed when they stay inside the root; None for
        anything else (a link out of the root or dangling, a socket, an entry gone meanwhile)."""
        try:
            if entry.is_symlink():
                if not self._inside(os.path.realpath(entry.path), top):
                    return None
                status = os.stat(entry.path)
            else:
                status = entry.stat(follow_symlinks=False)
        except OSError:
            return None
        return status if stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode) else None

    # ----------------------------------------------------------------------------------------------
    # multipart uploads

    def create_multipart_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        self._bucket(params)
        if key_parts(params.get("Key"))[-1] == "":
            raise ApiError("InvalidArgument", "A key ending in '/' is a folder on the local S3 root, not an object")
        upload_id = uuid.uuid4().hex
        folder = os.path.join(self._uploads(), upload_id)
        os.mkdir(folder)
        with open(os.path.join(folder, "upload.json"), "w", encoding="utf-8") as out:
            json.dump({"Bucket": params["Bucket"], "Key": params["Key"], "ContentType": params.get("ContentType")}, out)
        return {"Bucket": params["Bucket"], "Key": params["Key"], "UploadId": upload_id}

    def upload_part(self, params: dict[str, Any]) -> dict[str, Any]:
        self._bucket(params)
        folder = self._upload(params)
        number = _part_number(params.get("PartNumber"))
        temp, digest = self._receive_body(params)
        self._keep_part(folder, number, temp, digest)
        return {"ETag": f'"{digest}"'}

    def upload_part_copy(self, params: dict[str, Any]) -> dict[str, Any]:
        source_path, source_status = self._object(_copy_source(params.get("CopySource")))
        self._bucket(params)
        folder = self._upload(params)
        number = _part_number(params.get("PartNumber"))
        window = _byte_range(params.get("CopySourceRange"), source_status.st_size)
        first, last = window if window is not None else (0, source_status.st_size - 1)
        with open(source_path, "rb") as file:
            file.seek(first)
            temp, digest, _ = self._receive(_chunks(_Window(file, last - first + 1)))
        self._keep_part(folder, number, temp, digest)
        return {"CopyPartResult": {"ETag": f'"{digest}"', "LastModified": _when(os.stat(folder).st_mtime)}}

    def complete_multipart_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        bucket = self._bucket(params)
        folder = self._upload(params)
        asked = (params.get("MultipartUpload") or {}).get("Parts") or []
        if not asked:
            raise ApiError("MalformedXML", "The XML you provided was not well-formed or did not validate against our "
                           "published schema (CompleteMultipartUpload names no parts)")
        stored = {int(m.group(1)): (m.group(2), os.path.join(folder, m.group(0)))
                  for m in map(_PART_FILE.fullmatch, os.listdir(folder)) if m}
        chosen: list[str] = []
        previous = 0
        for part in asked:
            number = part.get("PartNumber")
            if not isinstance(number, int) or number <= previous:
                raise ApiError("InvalidPartOrder", "The list of parts was not in ascending order. The parts list must "
                               "be specified in order by part number.")
            have = stored.get(number)
            if have is None or have[0] not in _etags(part.get("ETag", "")):
                raise ApiError("InvalidPart", "One or more of the specified parts could not be found. The part may not "
                               "have been uploaded, or the specified entity tag may not match the part's entity tag "
                               f"(part {number})")
            chosen.append(have[1])
            previous = number
        for number, path in zip((p["PartNumber"] for p in asked[:-1]), chosen[:-1], strict=True):
            size = os.path.getsize(path)
            if size < MIN_PART:
                raise ApiError("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size "
                               f"(part {number} is {size} bytes; every part but the last is at least 5 MiB)")
        temp, digest, _ = self._receive(_joined(chosen))
        target, etag = self._store(temp, bucket, key_parts(params.get("Key")), digest)
        with open(os.path.join(folder, "upload.json"), encoding="utf-8") as file:
            self._keep_content_type(target, json.load(file).get("ContentType"))
        shutil.rmtree(folder, ignore_errors=True)
        return {"Location": f"https://{params['Bucket']}.s3.{self.region}.amazonaws.com/{params['Key']}",
                "Bucket": params["Bucket"], "Key": params["Key"], "ETag": etag}

    def abort_multipart_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        self._bucket(params)
        shutil.rmtree(self._upload(params))
        return {"ResponseMetadata": _metadata(204)}

    def _upload(self, params: dict[str, Any]) -> str:
        """The folder of the multipart upload `UploadId` of this bucket and key."""
        upload_id = params.get("UploadId")
        missing = ApiError("NoSuchUpload", "The specified multipart upload does not exist. The upload ID may be "
                           "invalid, or the upload may have been aborted or completed.", 404)
        if not isinstance(upload_id, str) or not _UPLOAD_ID.fullmatch(upload_id):
            raise missing
        folder = os.path.join(self._uploads(), upload_id)
        try:
            with open(os.path.join(folder, "upload.json"), encoding="utf-8") as file:
                upload = json.load(file)
        except (FileNotFoundError, ValueError):
            raise missing from None
        if not isinstance(upload, dict) or (upload.get("Bucket"), upload.get("Key")) != (params.get("Bucket"),
                                                                                           params.get("Key")):
            raise missing
        return folder

    def _keep_part(self, folder: str, number: int, temp: str, digest: str) -> None:
        try:
            os.replace(temp, os.path.join(folder, f"{number:05d}.{digest}"))
        except FileNotFoundError:  # aborted or completed meanwhile
            _discard(temp)
            raise ApiError("NoSuchUpload", "The specified multipart upload does not exist. The upload may have been "
                           "aborted or completed.", 404) from None
        for name in os.listdir(folder):  # an earlier upload of the same part number is replaced
            if name.startswith(f"{number:05d}.") and name != f"{number:05d}.{digest}":
                _discard(os.path.join(folder, name))

    # ----------------------------------------------------------------------------------------------
    # the root

    def _top(self) -> str:
        return os.path.realpath(self.root)

    @staticmethod
    def _inside(real: str, top: str) -> bool:
        return real == top or real.startswith(top.rstrip(os.sep) + os.sep)

    def _uploads(self) -> str:
        folder = os.path.join(self.root, UPLOADS)
        os.makedirs(folder, exist_ok=True)
        return folder

    def _bucket(self, params: Mapping[str, Any]) -> str:
        """The bucket's folder, links resolved: it must exist and lie inside the root."""
        name = params.get("Bucket")
        problem = bucket_name_problem(name)
        if problem is not None:
            raise ApiError("InvalidBucketName", f"The specified bucket is not valid: {preview(name)}: {problem}")
        folder = os.path.join(self.root, str(name))
        if not os.path.isdir(folder):
            raise ApiError("NoSuchBucket", f"The specified bucket does not exist: {name} (no folder of that name on "
                           "the local S3 root)", 404)
        real = os.path.realpath(folder)
        if not self._inside(real, self._top()):
            raise ApiError("AccessDenied", f"Access Denied: the bucket {name} is a link leading outside the local "
                           "S3 root", 403)
        return real

    def _object(self, params: Mapping[str, Any]) -> tuple[str, os.stat_result]:
        """The file of an existing object (links resolved, inside the root) and its status."""
        bucket = self._bucket(params)
        key = params.get("Key")
        parts = key_parts(key)
        if parts[-1] == "":
            raise _no_such_key(key)
        path = os.path.join(bucket, *parts)
        real = os.path.realpath(path)
        if not self._inside(real, self._top()):
            raise ApiError("AccessDenied", f"Access Denied: {preview(key)} is a link leading outside the local S3 "
                           "root", 403)
        try:
            status = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):
            raise _no_such_key(key) from None
        if not stat.S_ISREG(status.st_mode):
            raise _no_such_key(key)
        return real, status

    def _folders(self, bucket: str, parts: list[str]) -> str:
        """The folder the key's file goes in, made where missing, each step checked to stay inside the
        root (a link in the way may lead anywhere)."""
        top = self._top()
        folder = bucket
        for depth, part in enumerate(parts):
            step = os.path.join(folder, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(step)
            real = os.path.realpath(step)
            if not self._inside(real, top):
                raise ApiError("AccessDenied", f"Access Denied: the key prefix {preview('/'.join(parts[:depth + 1]))} "
                               "is a link leading outside the local S3 root", 403)
            if not os.path.isdir(real):
                raise ApiError("InvalidArgument", f"The key prefix {'/'.join(parts[:depth + 1])!r} is an object (a "
                               "file) on the local S3 root, so no key can lie under it")
            folder = real
        return folder

    def _target(self, bucket: str, parts: list[str]) -> str:
        """The path a write of the key puts its file at (a link there is replaced, not followed)."""
        target = os.path.join(self._folders(bucket, parts[:-1]), parts[-1])
        if os.path.isdir(target):
            raise ApiError("InvalidArgument", f"The key {'/'.join(parts)!r} is a folder holding other keys on the "
                           "local S3 root; it cannot also be an object")
        return target

    def _put_folder(self, bucket: str, parts: list[str], params: Mapping[str, Any]) -> dict[str, Any]:
        # A console "folder" (an empty object named `prefix/`): the folder is made, no key lists.
        if any(_chunks(params.get("Body"))):
            raise ApiError("InvalidArgument", "A key ending in '/' is a folder on the local S3 root and cannot hold "
                           "data")
        self._folders(bucket, parts[:-1])
        return {"ETag": f'"{hashlib.md5(b"", usedforsecurity=False).hexdigest()}"'}

    def _remove(self, bucket: str, key: object) -> None:
        """Delete the key's file (a link itself, not what it leads to), then the folders it leaves
        empty up to the bucket: S3 has no empty folders. A missing key is no error, as on S3."""
        parts = key_parts(key)
        path = os.path.join(bucket, *parts)
        parent = os.path.dirname(path)
        real = os.path.realpath(parent)
        if not self._inside(real, self._top()):
            raise ApiError("AccessDenied", f"Access Denied: the folder of {preview(key)} is a link leading outside "
                           "the local S3 root", 403)
        if parts[-1] != "" and os.path.lexists(path) and not os.path.isdir(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            _discard(self._type_file(path))
        folder = parent if parts[-1] != "" else path.rstrip("/")
        while folder.startswith(bucket + os.sep):
            try:
                os.rmdir(folder)
            except OSError:  # not empty, or a link
                break
            folder = os.path.dirname(folder)

    def _receive_body(self, params: Mapping[str, Any]) -> tuple[str, str]:
        """PutObject's or UploadPart's body in a temporary file, checked against its Content-MD5:
        (the file's path, its MD5 in hex)."""
        temp, digest, _ = self._receive(_chunks(params.get("Body")))
        try:
            _check_md5(params.get("ContentMD5"), digest)
        except ApiError:
            _discard(temp)
            raise
        return temp, digest

    def _receive(self, chunks: Iterable[bytes]) -> tuple[str, str, int]:
        """The data in a new temporary file: (its path, its MD5 in hex, its size)."""
        temp_dir = os.path.join(self._uploads(), "tmp")
        os.makedirs(temp_dir, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=temp_dir, prefix="body-")
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        try:
            with os.fdopen(handle, "wb") as out:
                for chunk in chunks:
                    size += len(chunk)
                    if size > MAX_PUT:
                        raise ApiError("EntityTooLarge", "Your proposed upload exceeds the maximum allowed object "
                                       "size (5 GiB in one PUT or part: use a multipart upload)")
                    digest.update(chunk)
                    out.write(chunk)
            os.chmod(temp, FILE_MODE)
        except BaseException:
            _discard(temp)
            raise
        return temp, digest.hexdigest(), size

    def _store(self, temp: str, bucket: str, parts: list[str], digest: str, *,
               exclusive: bool = False) -> tuple[str, str]:
        """Put a received file (MD5 `digest`) at the key, its folders made: (its path, its ETag)."""
        attempts = 3
        while True:
            attempts -= 1
            try:
                target = self._target(bucket, parts)
                self._place(temp, target, exclusive=exclusive)
            except FileNotFoundError:
                if attempts > 0:  # a delete beside it pruned the folder just made: make it again
                    continue
                _discard(temp)
                raise
            except BaseException:
                _discard(temp)
                raise
            return target, self._written(target, digest)

    def _place(self, temp: str, target: str, *, exclusive: bool = False) -> None:
        """Put the finished temporary file at `target` in one step: a rename, or with `exclusive` a
        link that fails if the key exists (PutObject's If-None-Match: *). On failure `temp` stays."""
        try:
            if exclusive:
                os.link(temp, target)
                os.unlink(temp)
            else:
                os.replace(temp, target)
        except FileExistsError:
            raise _precondition_failed() from None
        except OSError as err:
            if err.errno != errno.EXDEV:
                raise
            # The bucket lies on another filesystem than the root (a mount inside it): copy beside
            # the target first, where a rename is again one step.
            handle, near = tempfile.mkstemp(dir=os.path.dirname(target), prefix=TEMP_PREFIX)
            try:
                with os.fdopen(handle, "wb") as out, open(temp, "rb") as source:
                    shutil.copyfileobj(source, out, CHUNK)
                os.chmod(near, FILE_MODE)
                self._place(near, target, exclusive=exclusive)
            except BaseException:
                _discard(near)
                raise
            os.unlink(temp)

    def _written(self, target: str, digest: str) -> str:
        """The ETag of a file just written whose content's MD5 is `digest` (kept, so it is not read again)."""
        status = os.stat(target)
        if status.st_size < MD5_LIMIT:
            self._md5s[_signature(status)] = digest
        return self._etag(target, status)

    def _etag(self, path: str, status: os.stat_result) -> str:
        signature = _signature(status)
        if status.st_size >= MD5_LIMIT:
            made = hashlib.md5(repr(signature).encode(), usedforsecurity=False).hexdigest()
            return f'"{made}-{-(-status.st_size // MD5_LIMIT)}"'
        digest = self._md5s.get(signature)
        if digest is None:
            digest = _md5_of(path)
            if len(self._md5s) > 100_000:  # a long session over many files: start over rather than grow
                self._md5s.clear()
            self._md5s[signature] = digest
        return f'"{digest}"'

    # Content-Types: S3 keeps the one a PutObject, CreateMultipartUpload or CopyObject gave and sends
    # it back with GetObject and HeadObject. The root's files carry none, so each is kept in a small
    # file under UPLOADS named by the object's path, with the identity of the file it was given for:
    # a file rewritten by anything else (a job's output) is binary/octet-stream again, not whatever
    # an earlier upload to that key said.

    def _type_file(self, path: str) -> str:
        digest = hashlib.sha256(os.fsencode(path)).hexdigest()
        return os.path.join(self.root, UPLOADS, TYPES, digest[:2], digest)

    def _keep_content_type(self, path: str, kind: object) -> None:
        record = self._type_file(path)
        if not isinstance(kind, str) or not kind or kind == DEFAULT_CONTENT_TYPE or not _HEADER_TEXT.fullmatch(kind):
            _discard(record)  # a type that cannot be a header's value is not kept: the default it is
            return
        os.makedirs(os.path.dirname(record), exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=os.path.dirname(record), prefix="type-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"ContentType": kind, "File": list(_signature(os.stat(path)))}, out)
            os.replace(temp, record)
        except BaseException:
            _discard(temp)
            raise

    def _content_type(self, path: str, status: os.stat_result) -> str:
        try:
            with open(self._type_file(path), encoding="utf-8") as file:
                kept = json.load(file)
        except (OSError, ValueError):
            return DEFAULT_CONTENT_TYPE
        if not isinstance(kept, dict) or kept.get("File") != list(_signature(status)):
            return DEFAULT_CONTENT_TYPE
        kind = kept.get("ContentType")
        return kind if isinstance(kind, str) and _HEADER_TEXT.fullmatch(kind) else DEFAULT_CONTENT_TYPE

    def _described(self, status: os.stat_result, etag: str, window: tuple[int, int] | None,
                   content_type: str = DEFAULT_CONTENT_TYPE) -> dict[str, Any]:
        """HeadObject's and GetObject's answer but the body: the whole object, or a byte range (206)."""
        length = status.st_size if window is None else window[1] - window[0] + 1
        modified = _when(status.st_mtime)
        headers = {"content-length": str(length), "etag": etag, "content-type": content_type,
                   "accept-ranges": "bytes", "last-modified": formatdate(modified.timestamp(), usegmt=True)}
        answer: dict[str, Any] = {"AcceptRanges": "bytes", "LastModified": modified, "ContentLength": length,
                                  "ETag": etag, "ContentType": content_type, "Metadata": {}}
        if window is not None:
            answer["ContentRange"] = headers["content-range"] = f"bytes {window[0]}-{window[1]}/{status.st_size}"
        answer["ResponseMetadata"] = _metadata(200 if window is None else 206, headers)
        return answer


def _signature(status: os.stat_result) -> tuple[int, int, int, int]:
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")  # os.scandir names undecodable bytes with surrogates: no key is spelt so
    except UnicodeEncodeError:
        return False
    return True


def _md5_of(path: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    for chunk in _joined([path]):
        digest.update(chunk)
    return digest.hexdigest()


def _discard(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _joined(paths: Iterable[str]) -> Iterator[bytes]:
    for path in paths:
        with open(path, "rb") as file:
            while chunk := file.read(CHUNK):
                yield chunk


def _part_number(value: object) -> int:
    if not isinstance(value, int) or not 1 <= value <= MAX_PART_NUMBER:
        raise ApiError("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
    return value


def _check_md5(content_md5: object, digest: str) -> None:
    if content_md5 is None:
        return
    try:
        given = base64.b64decode(str(content_md5), validate=True).hex()
    except (ValueError, binascii.Error):
        raise ApiError("InvalidDigest", "The Content-MD5 you specified was invalid.") from None
    if given != digest:
        raise ApiError("BadDigest", "The Content-MD5 you specified did not match what was received.")


def _precondition_failed() -> ApiError:
    return ApiError("PreconditionFailed", "At least one of the pre-conditions you specified did not hold", 412)


def _preconditions(params: Mapping[str, Any], etag: str, status: os.stat_result) -> None:
    """GetObject's and HeadObject's conditional headers, with HTTP's precedence: If-Match before
    If-Unmodified-Since (412), If-None-Match before If-Modified-Since (304)."""
    modified = _when(status.st_mtime)
    tag = etag.strip('"')
    if params.get("IfMatch") is not None:
        wanted = _etags(params["IfMatch"])
        if tag not in wanted and "*" not in wanted:
            raise _precondition_failed()
    elif params.get("IfUnmodifiedSince") is not None and modified > _as_datetime(params["IfUnmodifiedSince"]):
        raise _precondition_failed()
    if params.get("IfNoneMatch") is not None:
        wanted = _etags(params["IfNoneMatch"])
        if tag in wanted or "*" in wanted:
            raise _bare(304)
    elif params.get("IfModifiedSince") is not None and modified <= _as_datetime(params["IfModifiedSince"]):
        raise _bare(304)

