"""Where the object store is, by the seeds' names.

The reference runtime reads `MINIO_ENDPOINT` as a host name (with `MINIO_PORT` and
`MINIO_USE_SSL`), its memory-sync tool as a full URL; both forms are accepted, so either env file
works. The bucket: `BLOOM_S3_BUCKET`, else the runtime's `MINIO_ARTIFACT_BUCKET`, else the sync
tool's `MINIO_BUCKET`, else `bloom-artifacts`.
"""

from urllib.parse import urlsplit

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from bloom.web.settings import OwnNamesOnly, bloom_env

DEFAULT_BUCKET = "bloom-artifacts"


class ObjectStoreSettings(OwnNamesOnly):
    """The S3 connection; mixed into the settings of every process that uses the store."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, env_ignore_empty=True)

    s3_endpoint: str = Field(
        "",
        validation_alias=bloom_env("S3_ENDPOINT", "MINIO_ENDPOINT"),
        description="http(s)://host:port, or a bare host name (then MINIO_PORT, MINIO_USE_SSL).",
    )
    s3_port: int = Field(9000, ge=1, le=65535, validation_alias=bloom_env("S3_PORT", "MINIO_PORT"))
    s3_use_ssl: str = Field("", validation_alias=bloom_env("S3_USE_SSL", "MINIO_USE_SSL"))
    s3_access_key: SecretStr = Field(
        SecretStr(""), validation_alias=bloom_env("S3_ACCESS_KEY", "MINIO_ACCESS_KEY")
    )
    s3_secret_key: SecretStr = Field(
        SecretStr(""), validation_alias=bloom_env("S3_SECRET_KEY", "MINIO_SECRET_KEY")
    )
    s3_bucket: str = Field(
        DEFAULT_BUCKET,
        min_length=3,
        max_length=63,
        pattern=r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$",
        validation_alias=bloom_env("S3_BUCKET", "MINIO_ARTIFACT_BUCKET", "MINIO_BUCKET"),
    )
    s3_region: str = Field("us-east-1", validation_alias=bloom_env("S3_REGION", "MINIO_REGION"))
    s3_timeout_sec: float = Field(
        10.0,
        gt=0,
        le=300,
        validation_alias=bloom_env("S3_TIMEOUT_SEC"),
        description="Connect and read timeout of one S3 request.",
    )
    s3_required: bool = Field(
        True,
        validation_alias=bloom_env("S3_REQUIRED"),
        description="Refuse to start when the store cannot be reached; false: start degraded "
        "(completes answer 503 until it is back).",
    )

    @property
    def s3_configured(self) -> bool:
        return bool(self.s3_endpoint)

    @property
    def s3_endpoint_url(self) -> str:
        """The endpoint as a URL, whichever form the environment gave."""
        endpoint = self.s3_endpoint.strip().rstrip("/")
        if "://" in endpoint:
            return endpoint
        scheme = "https" if self.s3_use_ssl.strip().lower() == "true" else "http"
        host = endpoint if urlsplit(f"//{endpoint}").port else f"{endpoint}:{self.s3_port}"
        return f"{scheme}://{host}"
