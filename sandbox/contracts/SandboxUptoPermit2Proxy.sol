// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

/// @notice The part of Uniswap's Permit2 `ISignatureTransfer` this proxy calls.
interface ISignatureTransfer {
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    function permitWitnessTransferFrom(
        PermitTransferFrom calldata permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// @title SandboxUptoPermit2Proxy
/// @notice The x402 `upto` Permit2 proxy for the local sandbox chain, written from the
/// interface the x402 foundation's facilitator calls (`settle`): the payer signs a Permit2
/// `PermitWitnessTransferFrom` of at most `permit.permitted.amount`, naming this contract
/// as spender and a witness `Witness(address to, address facilitator, uint256 validAfter)`;
/// only that facilitator may call `settle`, which has Permit2 move `amount` (no more than
/// the signed maximum) to `witness.to`. Permit2's address is a constant, so the runtime
/// code works wherever it is placed (the sandbox sets it at the foundation's canonical
/// `upto` proxy address).
contract SandboxUptoPermit2Proxy {
    ISignatureTransfer public constant PERMIT2 =
        ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    /// @notice The EIP-712 witness type string Permit2 appends to its own type.
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";

    bytes32 public constant WITNESS_TYPEHASH =
        keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    event Settled(uint256 amount);

    error InvalidOwner();
    error InvalidDestination();
    error PaymentTooEarly();
    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();

    /// @notice Move `amount` (at most `permit.permitted.amount`) of
    /// `permit.permitted.token` from `owner` to `witness.to`, as `owner` signed it; only
    /// `witness.facilitator` may call it.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external {
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            keccak256(
                abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter)
            ),
            WITNESS_TYPE_STRING,
            signature
        );
        emit Settled(amount);
    }
}
