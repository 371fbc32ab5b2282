"""How a Lake reaches S3, as plain picklable data: endpoint, region, addressing, credentials.

A :class:`Connection` is read off the Lake's boto3 client (:meth:`Connection.of`), so every
other reader of the lake — pyarrow's ``S3FileSystem``, DuckDB's httpfs secret, Polars'
storage options, a ``Lake`` re-created on a Dask or Spark worker — reaches the same endpoint
with the same identity, and the user configures S3 once.

The credentials are the client's *current* ones, frozen: temporary credentials (an assumed
role, SSO) expire at their usual time in the engines that receive them; re-derive them (make a
new scan, a new config) for jobs that outlive them. ``repr`` never shows the secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import boto3
from botocore import UNSIGNED
from botocore.config import Config

from lakelock._client import DEFAULT_READ_TIMEOUT, READ_TRIES

__all__ = ["Connection"]

AddressingStyle = Literal["path", "virtual", "auto"]
_STYLES: dict[object, AddressingStyle] = {"path": "path", "virtual": "virtual"}


@dataclass(frozen=True)
class Connection:
    """Endpoint, region, addressing style and credentials of one boto3 S3 client.

    ``endpoint_url`` is ``None`` for AWS itself (engines then find the regional endpoint);
    ``access_key`` is ``None`` for an anonymous (unsigned) client.
    """

    endpoint_url: str | None
    region: str | None
    addressing_style: AddressingStyle = "auto"
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, client: Any) -> Connection:
        """The connection ``client`` (a boto3 S3 client) uses right now."""
        meta = client.meta
        endpoint = meta.endpoint_url
        host = urlsplit(endpoint).hostname or "" if endpoint else ""
        s3_config = getattr(meta.config, "s3", None) or {}
        style = s3_config.get("addressing_style")
        # The signer's credentials are what the client signs with; absent when unsigned.
        credentials = getattr(client._request_signer, "_credentials", None)
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
        return cls(
            endpoint_url=None if _is_aws(host) else endpoint,
            region=meta.region_name,
            addressing_style="path"
            if style == "path"
            else "virtual"
            if style == "virtual"
            else "auto",
            access_key=frozen.access_key if frozen else None,
            secret_key=frozen.secret_key if frozen else None,
            session_token=frozen.token if frozen else None,
        )

    @property
    def scheme(self) -> str:
        """``http`` or ``https`` (AWS: ``https``)."""
        return urlsplit(self.endpoint_url).scheme if self.endpoint_url else "https"

    @property
    def host(self) -> str | None:
        """``host[:port]`` of a custom endpoint, ``None`` for AWS."""
        return urlsplit(self.endpoint_url).netloc if self.endpoint_url else None

    @property
    def path_style(self) -> bool:
        """Whether buckets go in the path (custom endpoints, unless told otherwise)."""
        if self.addressing_style == "auto":
            return self.endpoint_url is not None
        return self.addressing_style == "path"

    def client(self, **config: Any) -> Any:
        """A new boto3 S3 client for this connection; ``config`` are botocore ``Config``
        fields merged over lakelock's defaults (standard retries, a pool for threads)."""
        base = Config(
            retries={"mode": "standard", "total_max_attempts": 5},
            max_pool_connections=64,
            read_timeout=DEFAULT_READ_TIMEOUT / READ_TRIES,
            s3={"addressing_style": self.addressing_style},
            signature_version=UNSIGNED if self.access_key is None else None,
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            aws_session_token=self.session_token,
            config=base.merge(Config(**config)) if config else base,
        )


def _is_aws(host: str) -> bool:
    return host == "amazonaws.com" or host.endswith((".amazonaws.com", ".amazonaws.com.cn"))
