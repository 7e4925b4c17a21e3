"""The S3 artifact store against a real S3 endpoint (moto's server over HTTP): content-addressed
puts that write once, multipart for large content, byte-exact ranged reads, digests checked, the
bucket made when missing, and an unreachable store reported as such, quickly."""

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator

import pytest

from bloom.artifacts import ContentMissing, DigestMismatch, StoreUnavailable
from bloom.artifacts.s3 import S3Store, object_key
from bloom.objects.errors import PreconditionFailed
from bloom.objects.s3 import S3Bucket
from bloom.objects.settings import ObjectStoreSettings
from tests.support.net import closed_port
from tests.support.s3 import Bucket

MIB = 1024 * 1024
PART = 5 * MIB  # S3's smallest part


def store_for(bucket: Bucket, part_size: int = PART, **settings: object) -> S3Store:
    values = bucket.settings() | {"s3_timeout_sec": 2.0} | settings
    return S3Store(S3Bucket(ObjectStoreSettings(**values), part_size=part_size))  # type: ignore[arg-type]


async def read_all(store: S3Store, sha256: str, url: str | None, first: int, last: int) -> bytes:
    return b"".join([chunk async for chunk in await store.open(sha256, url, first, last)])


async def chunks_of(data: bytes, size: int = 1024 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.fixture
async def store(s3_bucket: Bucket) -> AsyncIterator[S3Store]:
    built = store_for(s3_bucket)
    yield built
    await built.close()


async def test_put_makes_the_bucket_and_writes_content_once(
    store: S3Store, s3_bucket: Bucket
) -> None:
    first = await store.put("hello, object store")
    again = await store.put("hello, object store")
    sha = hashlib.sha256(b"hello, object store").hexdigest()
    assert first == again
    assert (first.storage, first.content, first.sha256, first.size_bytes) == ("s3", None, sha, 19)
    assert first.url == f"s3://{s3_bucket.name}/{object_key(sha)}"
    assert s3_bucket.keys() == [object_key(sha)]
    assert await read_all(store, sha, first.url, 0, 18) == b"hello, object store"


async def test_multipart_content_reads_back_byte_exact_in_ranges(
    store: S3Store, s3_bucket: Bucket
) -> None:
    data = os.urandom(12 * MIB + 123)  # three parts: 5, 5 and the rest
    sha = hashlib.sha256(data).hexdigest()
    stored = await store.put_stream(chunks_of(data), sha)
    assert (stored.sha256, stored.size_bytes) == (sha, len(data))
    assert await read_all(store, sha, stored.url, 0, len(data) - 1) == data
    assert (
        await read_all(store, sha, stored.url, PART - 10, PART + 10) == data[PART - 10 : PART + 11]
    )
    again = await store.put_stream(chunks_of(data), sha)  # found present: only hashed
    assert again == stored
    assert s3_bucket.keys() == [object_key(sha)]


async def test_content_that_does_not_match_its_digest_is_not_stored(
    store: S3Store, s3_bucket: Bucket
) -> None:
    small_wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(DigestMismatch):
        await store.put_stream(chunks_of(b"small content"), small_wrong)
    with pytest.raises(DigestMismatch):  # multipart: the upload is aborted, not completed
        await store.put_stream(chunks_of(os.urandom(6 * MIB)), small_wrong)
    assert s3_bucket.keys() == []


async def test_missing_content_is_reported_as_missing(store: S3Store) -> None:
    await store.bucket.ensure_bucket()
    with pytest.raises(ContentMissing):
        await store.open("ab" * 32, None, 0, 10)


async def test_an_unreachable_store_is_unavailable_quickly() -> None:
    bucket = Bucket(f"http://127.0.0.1:{closed_port()}", "nowhere")
    store = store_for(bucket, s3_timeout_sec=1.0)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match=f"object store {bucket.endpoint} unreachable"):
        await store.put("anything")
    with pytest.raises(StoreUnavailable):
        await store.open("ab" * 32, None, 0, 1)
    assert time.monotonic() - started < 10
    await store.close()


def test_endpoint_as_the_reference_runtime_spells_it() -> None:
    """MINIO_ENDPOINT a host name, with MINIO_PORT and MINIO_USE_SSL (the reference runtime), or
    a full URL (its sync tool): either env file works."""
    assert ObjectStoreSettings(s3_endpoint="minio.lan").s3_endpoint_url == "http://minio.lan:9000"
    assert (
        ObjectStoreSettings(
            s3_endpoint="minio.lan", s3_port=9443, s3_use_ssl="true"
        ).s3_endpoint_url
        == "https://minio.lan:9443"
    )
    assert (
        ObjectStoreSettings(s3_endpoint="minio.lan:9001").s3_endpoint_url == "http://minio.lan:9001"
    )
    url = "https://minio.example.com/"
    assert ObjectStoreSettings(s3_endpoint=url).s3_endpoint_url == "https://minio.example.com"


async def test_racing_conditional_writes_each_have_one_winner(s3_bucket: Bucket) -> None:
    """Ten clients swap one key at once, first absent (If-None-Match), then from the ETag all of
    them read (If-Match): each round exactly one write lands, the rest are refused. (Each write's
    bytes differ from every other's: the ETag is the content's digest.)"""
    settings = ObjectStoreSettings(**s3_bucket.settings())  # type: ignore[arg-type]
    clients = [S3Bucket(settings) for _ in range(10)]
    await clients[0].ensure_bucket()

    async def attempt(client: S3Bucket, key: str, etag: str | None, mine: bytes) -> bool:
        try:
            await client.swap(key, mine, etag=etag)
        except PreconditionFailed:
            return False
        return True

    for round_ in range(20):
        key = f"race/{round_}"
        etag: str | None = None
        for step in ("create", "replace"):
            won = await asyncio.gather(
                *(attempt(c, key, etag, f"{step} {i}".encode()) for i, c in enumerate(clients))
            )
            assert won.count(True) == 1, f"{key}, {step}: {won.count(True)} writers won"
            read = await clients[0].read(key)
            assert read.data == f"{step} {won.index(True)}".encode()
            etag = read.etag
    for client in clients:
        await client.close()
