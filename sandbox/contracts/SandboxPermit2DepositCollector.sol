// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";

/// @notice The part of Uniswap's Permit2 `ISignatureTransfer` this collector calls.
interface IPermit2WitnessTransfer {
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

/// @title SandboxPermit2DepositCollector
/// @notice Deposits into the batch-settlement escrow from a payer's Permit2
/// `PermitWitnessTransferFrom`, written from the scheme's published collector interface.
///
/// The payer signs spender = this collector and a witness `DepositWitness(channelId)`, so
/// the permit is good for one channel only; Permit2 moves the tokens straight from the
/// payer to the escrow. `collectorData` = abi.encode(nonce, deadline, permit2Signature,
/// eip2612PermitData); a non-empty `eip2612PermitData` = abi.encode(value, deadline, v, r, s)
/// first grants Permit2 its allowance through the token's EIP-2612 `permit`.
contract SandboxPermit2DepositCollector {
    IPermit2WitnessTransfer public constant PERMIT2 =
        IPermit2WitnessTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    string public constant DEPOSIT_WITNESS_TYPE_STRING =
        "DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)";
    bytes32 public constant DEPOSIT_WITNESS_TYPEHASH = keccak256("DepositWitness(bytes32 channelId)");

    /// @notice The escrow this collector serves (baked into the runtime code).
    address public immutable x402BatchSettlement;

    event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason);
    event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode);
    event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data);

    error OnlyX402BatchSettlement();
    error Permit2612AmountMismatch();

    constructor(address escrow) {
        x402BatchSettlement = escrow;
    }

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != x402BatchSettlement) revert OnlyX402BatchSettlement();
        (uint256 nonce, uint256 deadline, bytes memory signature, bytes memory eip2612PermitData) =
            abi.decode(collectorData, (uint256, uint256, bytes, bytes));
        if (eip2612PermitData.length > 0) _tryPermit(payer, token, amount, eip2612PermitData);

        PERMIT2.permitWitnessTransferFrom(
            IPermit2WitnessTransfer.PermitTransferFrom({
                permitted: IPermit2WitnessTransfer.TokenPermissions({token: token, amount: amount}),
                nonce: nonce,
                deadline: deadline
            }),
            IPermit2WitnessTransfer.SignatureTransferDetails({to: msg.sender, requestedAmount: amount}),
            payer,
            keccak256(abi.encode(DEPOSIT_WITNESS_TYPEHASH, channelId)),
            DEPOSIT_WITNESS_TYPE_STRING,
            signature
        );
    }

    /// @dev Anyone who saw the permit may have used it already (it is public once relayed),
    /// so a failing `permit` is reported, not fatal: Permit2 then fails on its own if the
    /// allowance is really missing.
    function _tryPermit(address payer, address token, uint256 amount, bytes memory data) private {
        (uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s) =
            abi.decode(data, (uint256, uint256, uint8, bytes32, bytes32));
        if (value != amount) revert Permit2612AmountMismatch();
        try IERC20Permit(token).permit(payer, address(PERMIT2), value, deadline, v, r, s) {}
        catch Error(string memory reason) {
            emit EIP2612PermitFailedWithReason(token, payer, reason);
        } catch Panic(uint256 errorCode) {
            emit EIP2612PermitFailedWithPanic(token, payer, errorCode);
        } catch (bytes memory lowLevelData) {
            emit EIP2612PermitFailedWithData(token, payer, lowLevelData);
        }
    }
}
