"""EC2's failures classed onto ``provider.CloudError``, once, by code and status:

InsufficientInstanceCapacity, Unsupported,  InsufficientCapacity (EC2's code kept;
InsufficientFreeAddressesInSubnet, ...      the provider adds the zone and the type)
InstanceLimitExceeded, VcpuLimitExceeded    QuotaExceeded
RequestLimitExceeded                        RateLimited
5xx, connection errors, timeouts            TransientCloudError
AuthFailure, UnauthorizedOperation, ...     PermanentCloudError, code AuthFailure
no credentials in the chain                 PermanentCloudError, code NoCredentials
Invalid* (AMI, subnet, group, type)         InvalidMachineSpec
"""

from __future__ import annotations

from typing import Final

import botocore.exceptions

from nodepool_operator.cloud import provider

__all__ = ["CAPACITY_CODES", "classify"]

# An offering (a type in a zone) that cannot be had now, as Karpenter classes them:
# asking another zone or type may work, asking the same one again soon will not.
CAPACITY_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientCapacity",
        "InsufficientFreeAddressesInSubnet",
        "UnfulfillableCapacity",
        # The type is not offered in the subnet's zone.
        "Unsupported",
    }
)
_QUOTA_CODES: Final = frozenset(
    {"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"}
)
_AUTH_CODES: Final = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
        "OptInRequired",
        "Blocked",
    }
)
_THROTTLE_CODES: Final = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})


def classify(error: Exception, *, what: str) -> provider.CloudError:
    """The ``CloudError`` for an SDK failure of the call ``what`` (e.g. "RunInstances")."""
    if isinstance(error, botocore.exceptions.ClientError):
        return _classify_answer(error, what=what)
    if isinstance(
        error, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return provider.PermanentCloudError(
            f"{what}: no AWS credentials in the standard chain (environment, shared config "
            "and credentials files, web identity / IRSA, container or instance metadata)",
            code="NoCredentials",
        )
    if isinstance(error, botocore.exceptions.NoRegionError):
        return provider.PermanentCloudError(
            f"{what}: no AWS region configured (AWS_REGION or the shared config)",
            code="NoRegion",
        )
    if isinstance(
        error,
        botocore.exceptions.ConnectionError
        | botocore.exceptions.HTTPClientError
        | botocore.exceptions.CredentialRetrievalError
        | botocore.exceptions.TokenRetrievalError,
    ):
        return provider.TransientCloudError(f"{what}: {error}", code="ConnectionError")
    if isinstance(error, botocore.exceptions.ParamValidationError):
        return provider.InvalidMachineSpec(f"{what}: {error}", code="InvalidParameter")
    return provider.PermanentCloudError(f"{what}: {error}", code="SdkError")


def _classify_answer(error: botocore.exceptions.ClientError, *, what: str) -> provider.CloudError:
    code = str(error.response.get("Error", {}).get("Code", "Unknown"))
    text = str(error.response.get("Error", {}).get("Message", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = f"{what}: {code}: {text}"
    if code in _THROTTLE_CODES or status == 429:
        return provider.RateLimited(message, retry_after=None, code=code)
    # Before the 5xx rule: EC2 answers a lack of capacity with a 500, and asking the same
    # zone again at once does not help.
    if code in CAPACITY_CODES:
        return provider.InsufficientCapacity(message, zone=None, shape=None, code=code)
    if code in _QUOTA_CODES:
        return provider.QuotaExceeded(message, code=code)
    if status >= 500 or code in {"InternalError", "ServiceUnavailable", "Unavailable"}:
        return provider.TransientCloudError(message, code=code)
    if code in _AUTH_CODES:
        return provider.PermanentCloudError(
            f"{message} (check the operator's IAM role and the policy in deploy/aws/)",
            code="AuthFailure",
        )
    if code.startswith("Invalid") or code in {"MissingParameter", "UnsupportedOperation"}:
        return provider.InvalidMachineSpec(message, code=code)
    return provider.PermanentCloudError(message, code=code)
