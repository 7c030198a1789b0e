"""Where backups live: a directory, or a prefix of an S3-compatible bucket (boto3).

Both answer the same small set of calls, with keys relative to the destination (`<id>/shard-0/shard.json`):
put_file / put_bytes (a reader never sees half a file: a directory writes a temporary file, fsyncs it and
renames it; S3's PUT is atomic), open_read (a binary file object), get_bytes, exists, size, list, backup_ids,
delete_prefix. `describe(key)` is what error messages name (the file's path, or s3://bucket/key).

S3 credentials come from the options (the tool's --s3-* options, a node's backup-s3-* config) or else boto3's
standard chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials); the endpoint from
--s3-endpoint-url / backup-s3-endpoint-url or AWS_ENDPOINT_URL. They are never logged or printed: describe()
and every message name only the bucket and key.
"""

import os
import shutil

from .format import ID_RE, BackupError


def open_storage(url: str, s3_options: dict = None):
    """The storage of a destination: `s3://BUCKET[/PREFIX]` or a directory path."""
    if url.startswith("s3://"):
        return S3Storage(url, **(s3_options or {}))
    if "://" in url:
        raise BackupError("%r: a backup destination is a directory or s3://BUCKET/PREFIX" % url)
    return DirStorage(url)


def _tmp_name(path):
    """A temporary name of its own: two nodes of a cluster may write the same manifest at once (a shared
    directory), each its own temporary file, renamed atomically."""
    import secrets
    return "%s.%d.%s.tmp" % (path, os.getpid(), secrets.token_hex(4))


class DirStorage:
    def __init__(self, path):
        self.root = os.path.abspath(path)
        self.url = self.root

    def _path(self, key):
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise BackupError("bad backup key %r" % key)
        return os.path.join(self.root, *parts)

    def describe(self, key) -> str:
        return self._path(key)

    def put_file(self, key, local_path):
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = _tmp_name(path)
        shutil.copyfile(local_path, tmp)
        self._commit(tmp, path)

    def put_bytes(self, key, data: bytes):
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = _tmp_name(path)
        with open(tmp, "wb") as f:
            f.write(data)
        self._commit(tmp, path)

    @staticmethod
    def _commit(tmp, path):
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_read(self, key):
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError:
            raise BackupError("%s is missing" % self._path(key)) from None

    def get_bytes(self, key, max_bytes=None) -> bytes:
        with self.open_read(key) as f:
            data = f.read(max_bytes + 1 if max_bytes else -1)
        if max_bytes and len(data) > max_bytes:
            raise BackupError("%s is larger than %d bytes" % (self._path(key), max_bytes))
        return data

    def exists(self, key) -> bool:
        return os.path.isfile(self._path(key))

    def size(self, key) -> int:
        return os.path.getsize(self._path(key))

    def list(self, prefix) -> list:
        """[(key, size)] of the files under prefix (a backup id or a piece's directory)."""
        base = self._path(prefix)
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.endswith(".tmp"):
                    continue
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, self.root).replace(os.sep, "/"), os.path.getsize(full)))
        return sorted(out)

    def backup_ids(self) -> list:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if ID_RE.match(n) and os.path.isdir(os.path.join(self.root, n)))

    def delete_prefix(self, prefix):
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class S3Storage:
    """An S3-compatible bucket through boto3. The bucket must exist (creating one is the account owner's act)."""

    def __init__(self, url, endpoint_url=None, region=None, access_key_id=None, secret_access_key=None):
        try:
            import boto3
            import botocore.config
        except ImportError:  # pragma: no cover - boto3 is a dependency
            raise BackupError("S3 destinations need boto3 (pip install boto3)") from None
        rest = url[len("s3://"):]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise BackupError("%r names no bucket: s3://BUCKET/PREFIX" % url)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = "s3://%s/%s" % (bucket, self.prefix) if self.prefix else "s3://%s" % bucket
        kwargs = {}
        endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        if endpoint_url:
            kwargs["endpoint_url"] = endpoint_url
        if region:
            kwargs["region_name"] = region
        if access_key_id or secret_access_key:
            kwargs["aws_access_key_id"] = access_key_id or None
            kwargs["aws_secret_access_key"] = secret_access_key or None
        # retries on throttling and 5xx answers (botocore's standard mode), bounded connect and read times
        cfg = botocore.config.Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10,
                                     read_timeout=60)
        self.client = boto3.client("s3", config=cfg, **kwargs)
        self._errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)

    def _key(self, key):
        if any(p in ("", ".", "..") for p in key.split("/")):
            raise BackupError("bad backup key %r" % key)
        return "%s/%s" % (self.prefix, key) if self.prefix else key

    def describe(self, key) -> str:
        return "s3://%s/%s" % (self.bucket, self._key(key))

    def _fail(self, what, key, exc):
        text = str(exc)
        raise BackupError("%s %s: %s" % (what, self.describe(key) if key is not None else self.url, text)) from None

    def put_file(self, key, local_path):
        try:
            self.client.upload_file(local_path, self.bucket, self._key(key))
        except self._errors as exc:
            self._fail("cannot write", key, exc)

    def put_bytes(self, key, data):
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except self._errors as exc:
            self._fail("cannot write", key, exc)

    def open_read(self, key):
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except self._errors as exc:
            if _not_found(exc):
                raise BackupError("%s is missing" % self.describe(key)) from None
            self._fail("cannot read", key, exc)

    def get_bytes(self, key, max_bytes=None) -> bytes:
        body = self.open_read(key)
        try:
            data = body.read(max_bytes + 1 if max_bytes else None)
        finally:
            body.close()
        if max_bytes and len(data) > max_bytes:
            raise BackupError("%s is larger than %d bytes" % (self.describe(key), max_bytes))
        return data

    def exists(self, key) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except self._errors as exc:
            if _not_found(exc):
                return False
            self._fail("cannot read", key, exc)

    def size(self, key) -> int:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"]
        except self._errors as exc:
            self._fail("cannot read", key, exc)

    def _objects(self, prefix, delimiter=None):
        kwargs = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                yield page
        except self._errors as exc:
            self._fail("cannot list", None, exc)

    def list(self, prefix) -> list:
        base = self._key(prefix) + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        out = []
        for page in self._objects(base):
            for obj in page.get("Contents", []):
                out.append((obj["Key"][strip:], obj["Size"]))
        return sorted(out)

    def backup_ids(self) -> list:
        base = self.prefix + "/" if self.prefix else ""
        ids = set()
        for page in self._objects(base, delimiter="/"):
            for p in page.get("CommonPrefixes", []):
                name = p["Prefix"][len(base):].rstrip("/")
                if ID_RE.match(name):
                    ids.add(name)
        return sorted(ids)

    def delete_prefix(self, prefix):
        keys = [self._key(k) for k, _s in self.list(prefix)]
        for i in range(0, len(keys), 1000):
            try:
                self.client.delete_objects(Bucket=self.bucket,
                                           Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
            except self._errors as exc:
                self._fail("cannot delete", prefix, exc)


def _not_found(exc) -> bool:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
    return code in ("404", "NoSuchKey", "NotFound")
