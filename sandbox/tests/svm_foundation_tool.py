"""Runs in the x402 foundation's SVM environment (`svm_foundation.py`), never in the
project's: reads a JSON request on stdin, answers JSON on stdout.

`pay`: the foundation's client (`ExactSvmScheme` with a `KeypairSigner`, on the given RPC
URL) builds the inner payload for `requirements`. `facilitate`: the foundation's
facilitator (`ExactSvmFacilitatorScheme` with a `FacilitatorKeypairSigner` on the RPC URL)
verifies and settles `payment` against `requirements`.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any


def pay(request: dict[str, Any]) -> Any:
    from solders.keypair import Keypair
    from x402.mechanisms.svm import KeypairSigner
    from x402.mechanisms.svm.exact import ExactSvmScheme
    from x402.schemas import PaymentRequirements

    signer = KeypairSigner(Keypair.from_base58_string(request["secret_key"]))
    scheme = ExactSvmScheme(signer, rpc_url=request["rpc_url"])
    requirements = PaymentRequirements.model_validate(request["requirements"])
    return scheme.create_payment_payload(requirements)


def facilitate(request: dict[str, Any]) -> Any:
    from solders.keypair import Keypair
    from x402.mechanisms.svm import FacilitatorKeypairSigner
    from x402.mechanisms.svm.exact import ExactSvmFacilitatorScheme
    from x402.schemas import PaymentPayload, PaymentRequirements

    keypair = Keypair.from_base58_string(request["fee_payer"])
    facilitator = ExactSvmFacilitatorScheme(
        FacilitatorKeypairSigner(keypair, rpc_url=request["rpc_url"])
    )
    payment = PaymentPayload.model_validate(request["payment"])
    requirements = PaymentRequirements.model_validate(request["requirements"])
    verified = facilitator.verify(payment, requirements)
    settled = facilitator.settle(payment, requirements)
    return {
        "verify": verified.model_dump(by_alias=True, exclude_none=True),
        "settle": settled.model_dump(by_alias=True, exclude_none=True),
    }


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # the foundation's code warns that its RPC client is old
    command = {"pay": pay, "facilitate": facilitate}[sys.argv[1]]
    print(json.dumps(command(json.loads(sys.stdin.read()))))
