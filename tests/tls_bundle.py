"""The suite's CA bundle: one certificate whose key nobody has.

Every test speaks plain HTTP to 127.0.0.1, so no certificate is ever checked; but httpx
builds an SSL context for each client, and so reads the whole CA bundle that
`SSL_CERT_FILE` names: about 20 ms of CPU per client, for thousands of clients in a run.
`use()` points the test session, and every process it starts, at the one-certificate
bundle `loopback_only_ca.pem`; `system_environment()` is the environment as it was, for a
step that reaches a real package registry (building the foundation's MCP environment).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["BUNDLE", "system_environment", "use"]

BUNDLE = Path(__file__).with_name("loopback_only_ca.pem")
_VARIABLE = "SSL_CERT_FILE"
#: What `SSL_CERT_FILE` was before `use()` ("" if unset), kept in the environment so that
#: the processes the session starts (xdist's workers among them) know it too.
_SAVED = "X402_EUR_TESTS_SYSTEM_SSL_CERT_FILE"


def use() -> None:
    os.environ.setdefault(_SAVED, os.environ.get(_VARIABLE, ""))
    os.environ[_VARIABLE] = str(BUNDLE)


def system_environment() -> dict[str, str]:
    """This process's environment with the CA bundle it had before `use()`."""
    environment = dict(os.environ)
    saved = environment.pop(_SAVED, None)
    if saved is None:
        return environment
    if saved:
        environment[_VARIABLE] = saved
    else:
        environment.pop(_VARIABLE, None)
    return environment
