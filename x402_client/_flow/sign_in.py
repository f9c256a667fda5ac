"""Sign in instead of paying again (the x402 `sign-in-with-x` extension), before a payment.

When a v2 402 offers a sign-in and `PaymentOptions.sign_in_with_x` is on, the payer signs
the challenge with the EVM key (EIP-191 over the EIP-4361 message, `_protocol.sign_in`)
and sends the request again with the `SIGN-IN-WITH-X` header and no payment. Any answer
but a 402 is the merchant's answer to the caller: nothing was paid, so there is no
receipt, no ledger entry, no journal row and nothing counted against a budget. A 402
means the merchant did not let that wallet in (it has not paid, or the signature did not
verify: the merchant does not say which); the payer then pays the first 402 as it would
have without the sign-in. A challenge this client must not sign is not signed; the
payment goes ahead as usual.

The signed header is a credential (merchants accept it again for minutes): it is built
here, sent to the origin that asked for it and to no other, never logged, journaled or
kept, and taken off the request once it is sent, so no exception's request holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

import httpx

from .._options import PaymentOptions
from .._protocol.assets import KNOWN_ASSETS
from .._protocol.dialects import Challenge, Dialect
from .._protocol.errors import X402Error
from .._protocol.redact import safe_url
from .._protocol.sign_in import (
    SIGN_IN_HEADER,
    SIGN_IN_WITH_X,
    SignInChallenge,
    SignInRefused,
    personal_sign_payload,
    read_sign_in,
    sign_in_header,
    siwe_message,
)
from .._rails._evm_signing import SignerCache, evm_extra_installed, keccak256

__all__ = ["offers_sign_in", "sign_in", "sign_in_chains"]

logger = logging.getLogger("x402_client")

#: How the caller's client sends one request (its inner transport).
Send = Callable[[httpx.Request], Awaitable[httpx.Response]]


def sign_in_chains(options: PaymentOptions) -> frozenset[int]:
    """The EVM chains the client pays on with its key, which it may sign in on: those of
    its RPC endpoints, of the tokens it was told about and of the built-in token table."""
    chains: set[int | str] = {chain for chain, _ in KNOWN_ASSETS}
    chains.update(asset.chain_id for asset in options.assets)
    if options.evm is not None:
        chains.update(options.evm.rpc_urls)
    return frozenset(chain for chain in chains if isinstance(chain, int))  # not Solana's


def offers_sign_in(options: PaymentOptions, challenge: Challenge) -> bool:
    """Whether to try signing in before paying `challenge`: the option is on, there is an
    EVM key, and the (v2) 402 declares the extension."""
    return (
        options.sign_in_with_x
        and options.evm is not None
        and challenge.dialect is Dialect.STANDARD_V2
        and SIGN_IN_WITH_X in (challenge.extensions or {})
    )


async def sign_in(
    options: PaymentOptions,
    signers: SignerCache,
    challenge: Challenge,
    retry: httpx.Request,
    send: Send,
) -> httpx.Response | None:
    """Sign `challenge`'s sign-in and send `retry` (the request again, without a payment)
    with it: the merchant's answer, or None when there is nothing to sign, the challenge
    is refused, or the merchant answered 402 (the caller then pays). A request that fails
    on its way is an `X402Error` that says nothing was paid (`money_moved` False)."""
    read = _read(options, challenge, retry.url)
    if read is None or not evm_extra_installed():
        return None
    signer = signers.signer(options)
    message = siwe_message(read, signer.address)
    signature = "0x" + signer.sign(keccak256(personal_sign_payload(message))).hex()
    retry.headers[SIGN_IN_HEADER] = sign_in_header(read, signer.address, signature)
    del message, signature
    where = safe_url(str(retry.url.copy_with(query=None)))
    try:
        response = await send(retry)
    except X402Error:
        raise
    except httpx.HTTPError as exc:
        raise X402Error(
            f"signing in at {where} failed ({type(exc).__name__}: {exc}); nothing was paid",
            request=retry,
        ) from exc
    finally:
        # The credential leaves with this one request: no error's request keeps it.
        del retry.headers[SIGN_IN_HEADER]
    if response.status_code != 402:
        logger.info("x402: signed in at %s as %s; nothing paid", where, signer.address)
        return response
    await response.aclose()
    logger.info("x402: %s did not accept the sign-in of %s; paying", where, signer.address)
    return None


def _read(options: PaymentOptions, challenge: Challenge, url: httpx.URL) -> SignInChallenge | None:
    """The challenge to sign, or None (refused: logged, nothing signed)."""
    try:
        return read_sign_in(
            challenge.extensions,
            url=str(url),
            chains=sign_in_chains(options),
            now=datetime.now(timezone.utc),
        )
    except SignInRefused as exc:
        shown = safe_url(str(url.copy_with(query=None)))
        logger.info("x402: not signing in at %s: %s; paying instead", shown, exc)
        return None
