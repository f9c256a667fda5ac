// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// @notice The ERC-3009 call this collector makes (USDC's bytes-signature form).
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @title SandboxErc3009DepositCollector
/// @notice Deposits into the batch-settlement escrow from a payer's ERC-3009
/// `ReceiveWithAuthorization`, written from the scheme's published collector interface.
///
/// The payer signs `to` = this collector and `nonce` = keccak256(abi.encode(channelId,
/// salt)): the authorization can only be redeemed here (ERC-3009 lets only `to` receive it)
/// and only for the one channel, and the collector only runs inside the escrow's `deposit`
/// for that channel. `collectorData` = abi.encode(validAfter, validBefore, salt, signature).
contract SandboxErc3009DepositCollector {
    using SafeERC20 for IERC20;

    /// @notice The escrow this collector serves (baked into the runtime code, so copying the
    /// code elsewhere keeps it).
    address public immutable x402BatchSettlement;

    error OnlyX402BatchSettlement();

    constructor(address escrow) {
        x402BatchSettlement = escrow;
    }

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != x402BatchSettlement) revert OnlyX402BatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        IERC20(token).safeTransfer(msg.sender, amount);
    }
}
