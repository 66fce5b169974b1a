"""ECR's token flow: GetAuthorizationToken (boto3) gives a 12-hour basic-auth password for `AWS`.

AWS credentials come from boto3's usual chain (environment, profile, instance role), never from
this project's config. Tokens are cached until shortly before they expire.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
from dataclasses import dataclass, field

# Renew this long before ECR's expiry, so a push that starts on an old token still finishes.
_RENEW_BEFORE = dt.timedelta(minutes=15)


class EcrTokenError(RuntimeError):
    """No ECR token: no AWS credentials, access denied, or the ECR API unreachable."""


@dataclass(frozen=True)
class EcrToken:
    username: str
    password: str = field(repr=False)  # never in a log through repr()
    expires_at: dt.datetime
    proxy_endpoint: str


_cache: dict[tuple[str, str | None], EcrToken] = {}
_lock = threading.Lock()


def ecr_token(region: str, endpoint_url: str | None = None) -> EcrToken:
    """A valid token for the account's registry in `region` (cached until near its expiry)."""
    key = (region, endpoint_url)
    with _lock:
        cached = _cache.get(key)
        if cached is not None and cached.expires_at - _RENEW_BEFORE > dt.datetime.now(dt.UTC):
            return cached
        token = _fetch(region, endpoint_url)
        _cache[key] = token
        return token


def _fetch(region: str, endpoint_url: str | None) -> EcrToken:
    # Here, not at the top: boto3 is imported only on hosts that push to ECR.
    import boto3
    import botocore.exceptions

    where = f"ECR in {region}" + (f" at {endpoint_url}" if endpoint_url else "")
    try:
        client = boto3.session.Session().client("ecr", region_name=region, endpoint_url=endpoint_url)
        data = client.get_authorization_token()["authorizationData"]
    except botocore.exceptions.NoCredentialsError:
        raise EcrTokenError(
            f"{where}: no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or a role)"
        ) from None
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        raise EcrTokenError(
            f"{where}: GetAuthorizationToken failed: {error.get('Code')}: {error.get('Message')}"
        ) from None
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise EcrTokenError(f"{where}: GetAuthorizationToken failed: {exc}") from None
    if not data:
        raise EcrTokenError(f"{where}: GetAuthorizationToken returned no authorization data")
    try:
        username, password = base64.b64decode(data[0]["authorizationToken"]).decode().split(":", 1)
    except (KeyError, ValueError) as exc:
        raise EcrTokenError(
            f"{where}: the authorization token is not base64 'user:password': {exc}"
        ) from None
    expires = data[0].get("expiresAt") or dt.datetime.now(dt.UTC) + dt.timedelta(hours=12)
    return EcrToken(username, password, expires, data[0].get("proxyEndpoint", ""))
