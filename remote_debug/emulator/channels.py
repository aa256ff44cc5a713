"""A training job's S3 traffic: input channels into ``/opt/ml/input/data/<channel>``, artifacts out.

What SageMaker does, and so what this does:

* ``S3Prefix``: every object whose key starts with the prefix.  A prefix naming one object
  (``s3://b/data/train.csv``) gives that file; otherwise the objects under ``prefix/`` keep their path
  below it, and a bare key prefix (``s3://b/data/part-``) keeps the path below the prefix's last ``/``.
* ``ManifestFile``: a JSON list, ``[{"prefix": "s3://b/p/"}, "rel/one", "rel/two", ...]``; each file lands
  at its relative path.
* ``FullyReplicated`` gives every node every object; ``ShardedByS3Key`` gives node *i* of *n* the
  objects *i*, *i+n*, ... of the sorted key list.
* Output: ``/opt/ml/model`` -> ``<S3OutputPath>/<job>/output/model.tar.gz`` and ``/opt/ml/output/data``
  -> ``.../output.tar.gz``, members named relative to the directory.

``AugmentedManifestFile``, Pipe mode and file-system data sources are refused with a ``ClientError``
the job fails with, as SageMaker fails a job whose channel it cannot serve.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

S3Object = tuple[str, str, PurePosixPath]  # (bucket, key, path inside the channel directory)
CONFIG_KEYS = ("ContentType", "TrainingInputMode", "S3DistributionType", "RecordWrapperType")


class ChannelError(Exception):
    """A channel SageMaker would refuse or could not fetch: the job fails with ``ClientError: <message>``."""


@dataclass(frozen=True)
class S3Url:
    bucket: str
    key: str

    @classmethod
    def parse(cls, url: str) -> S3Url:
        if not url.startswith("s3://"):
            raise ChannelError(f"{url} is not an s3:// URL")
        bucket, _, key = url[len("s3://") :].partition("/")
        if not bucket:
            raise ChannelError(f"{url} names no bucket")
        return cls(bucket, key)

    def join(self, *parts: str) -> S3Url:
        key = "/".join([self.key.rstrip("/"), *parts]) if self.key.rstrip("/") else "/".join(parts)
        return S3Url(self.bucket, key)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def input_mode(channel: dict[str, Any], algorithm: dict[str, Any]) -> str:
    return str(channel.get("InputMode") or algorithm.get("TrainingInputMode") or "File")


def channel_config(channel: dict[str, Any], algorithm: dict[str, Any]) -> dict[str, str]:
    """One entry of ``inputdataconfig.json``, with the keys and defaults SageMaker writes."""
    source = channel.get("DataSource", {}).get("S3DataSource", {})
    config = {
        "TrainingInputMode": input_mode(channel, algorithm),
        "S3DistributionType": str(source.get("S3DataDistributionType", "FullyReplicated")),
        "RecordWrapperType": str(channel.get("RecordWrapperType", "None")),
    }
    if channel.get("ContentType"):
        config["ContentType"] = str(channel["ContentType"])
    return {key: config[key] for key in CONFIG_KEYS if key in config}


def check_channel(channel: dict[str, Any], algorithm: dict[str, Any]) -> None:
    """Refuse, before any node starts, what the emulator cannot serve."""
    name = channel["ChannelName"]
    mode = input_mode(channel, algorithm)
    if mode == "Pipe":
        raise ChannelError(f"channel {name}: Pipe input mode is not supported by the emulator; use File or FastFile")
    source = channel.get("DataSource", {})
    if "S3DataSource" not in source:
        kinds = ", ".join(sorted(source)) or "none"
        raise ChannelError(f"channel {name}: only S3 data sources are supported by the emulator (got {kinds})")
    kind = source["S3DataSource"].get("S3DataType", "S3Prefix")
    if kind not in ("S3Prefix", "ManifestFile"):
        raise ChannelError(f"channel {name}: S3DataType {kind} is not supported by the emulator")


def list_keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def _safe_relative(path: str, where: str) -> PurePosixPath:
    relative = PurePosixPath(path.lstrip("/"))
    if not relative.parts or ".." in relative.parts:
        raise ChannelError(f"{where}: {path!r} is not a path inside the channel")
    return relative


def channel_objects(s3: Any, channel: dict[str, Any]) -> list[S3Object]:
    """(bucket, key, path in the channel directory) for every object of the channel, sorted by key."""
    name = channel["ChannelName"]
    source = channel["DataSource"]["S3DataSource"]
    url = S3Url.parse(source["S3Uri"])
    try:
        if source.get("S3DataType", "S3Prefix") == "ManifestFile":
            manifest = json.loads(s3.get_object(Bucket=url.bucket, Key=url.key)["Body"].read())
            if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
                raise ChannelError(f"channel {name}: {url} is not a manifest ([{{'prefix': ...}}, 'file', ...])")
            prefix = S3Url.parse(str(manifest[0].get("prefix", "")))
            objects = []
            for entry in manifest[1:]:
                relative = _safe_relative(str(entry), f"channel {name} manifest")
                objects.append((prefix.bucket, prefix.join(str(relative)).key, relative))
            return sorted(objects, key=lambda item: item[1])
        keys = list_keys(s3, url.bucket, url.key)
        if url.key in keys and not url.key.endswith("/"):
            # one object: SageMaker gives it under its own file name
            return [(url.bucket, url.key, PurePosixPath(PurePosixPath(url.key).name))]
        folder = url.key if url.key.endswith("/") or not url.key else url.key + "/"
        under = [key for key in keys if key.startswith(folder)]
        base = folder if under else url.key[: url.key.rfind("/") + 1]
        chosen = under or keys
        objects = [
            (url.bucket, key, _safe_relative(key[len(base) :], f"channel {name}"))
            for key in chosen
            if not key.endswith("/")  # "folder" placeholder objects
        ]
    except ChannelError:
        raise
    except Exception as exc:  # botocore's ClientError, a body that is not JSON, ...
        raise ChannelError(f"channel {name}: cannot read {url}: {exc}") from None
    if not objects:
        raise ChannelError(f"channel {name}: no objects at {url}")
    return sorted(objects, key=lambda item: item[1])


def shard(objects: list[S3Object], index: int, count: int) -> list[S3Object]:
    return objects[index::count]


def download(s3: Any, objects: list[S3Object], target: Path, channel: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for bucket, key, relative in objects:
        destination = target.joinpath(*relative.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            s3.download_file(bucket, key, str(destination))
        except Exception as exc:
            raise ChannelError(f"channel {channel}: cannot download s3://{bucket}/{key}: {exc}") from None


def tar_directories(sources: list[Path], archive: Path) -> int:
    """Pack the files of ``sources`` (the first holding a name wins) into ``archive``; the file count.

    An empty directory still gives an (empty) archive: SageMaker sets ``S3ModelArtifacts`` for every
    completed job, and launchers read it unconditionally.
    """
    seen: set[str] = set()
    members: list[tuple[Path, str]] = []
    for source in sources:
        if not source.is_dir():
            continue
        for path in sorted(source.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue  # a link could point anywhere on the host: SageMaker's tar would not follow it either
            name = path.relative_to(source).as_posix()
            if name not in seen:
                seen.add(name)
                members.append((path, name))
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for path, name in members:
            tar.add(path, arcname=name, recursive=False)
    return len(members)


def upload(s3: Any, archive: Path, url: S3Url) -> None:
    try:
        s3.upload_file(str(archive), url.bucket, url.key)
    except Exception as exc:
        raise ChannelError(f"cannot upload to {url}: {exc}") from None
