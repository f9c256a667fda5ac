// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {Multicall} from "@openzeppelin/contracts/utils/Multicall.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// @notice What the escrow asks of a deposit collector: pull `amount` of `token` from
/// `payer` for `channelId` and hand it to the caller (the escrow).
interface IDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

/// @title SandboxBatchSettlement
/// @notice The x402 `batch-settlement` escrow for the local sandbox chain, written from the
/// scheme's published interface (`x402BatchSettlement`: same functions, structs, EIP-712
/// types, events and errors, so the foundation's facilitator and clients work against it).
///
/// A payer deposits into a channel once; each request the payer signs a cumulative
/// `Voucher(channelId, maxClaimableAmount)`; the receiver claims vouchers (accounting only)
/// and settles (one transfer per receiver and token); what was never claimed goes back to
/// the payer through a cooperative refund or, without the receiver's help, a timed
/// withdrawal.
///
/// The channel id is the EIP-712 digest of the channel's configuration, so it binds the
/// chain and this contract's address. OpenZeppelin's EIP712 rebuilds its domain separator
/// whenever `address(this)` differs from the deploying address, which keeps ids right when
/// the runtime code is placed at the canonical address with `anvil_setCode`.
contract SandboxBatchSettlement is EIP712, Multicall, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    struct ChannelConfig {
        address payer;
        address payerAuthorizer; // signs vouchers; zero: the payer verifies them itself (ERC-1271)
        address receiver;
        address receiverAuthorizer; // signs claim batches and refunds for the receiver
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct WithdrawalState {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed; // cumulative: the channel's claimed total after this row
    }

    uint40 public constant MIN_WITHDRAW_DELAY = 15 minutes;
    uint40 public constant MAX_WITHDRAW_DELAY = 30 days;

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    mapping(bytes32 channelId => ChannelState) public channels;
    mapping(bytes32 channelId => uint256) public refundNonce;
    mapping(bytes32 channelId => WithdrawalState) public pendingWithdrawals;
    mapping(address receiver => mapping(address token => ReceiverState)) public receivers;

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);

    error InvalidChannel();
    error ZeroDeposit();
    error DepositOverflow();
    error InvalidSignature();
    error NotReceiverAuthorizer();
    error NotAuthorizedToClaim();
    error NotAuthorizedToRefund();
    error ClaimExceedsCeiling();
    error ClaimExceedsBalance();
    error WithdrawalAlreadyPending();
    error WithdrawalNotPending();
    error NotAuthorizedToFinalizeWithdraw();
    error WithdrawDelayNotElapsed();
    error NothingToWithdraw();
    error WithdrawAmountExceedsAvailable();
    error WithdrawDelayOutOfRange();
    error EmptyBatch();
    error DepositCollectionFailed();
    error InvalidCollector();
    error InvalidRefundNonce();
    error ZeroRefund();

    constructor() EIP712("x402 Batch Settlement", "1") {}

    // --- deposits -----------------------------------------------------------------------

    /// @notice Add `amount` to the channel of `config`, pulled from the payer by `collector`.
    /// Anyone may call it (a facilitator relays the payer's signed authorization); the
    /// collector is not trusted: only the escrow's own token balance rising by exactly
    /// `amount` counts.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannel();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange();
        }
        if (amount == 0) revert ZeroDeposit();
        if (collector == address(0)) revert InvalidCollector();

        bytes32 channelId = getChannelId(config);
        ChannelState storage channel = channels[channelId];
        uint256 newBalance = uint256(channel.balance) + amount;
        if (newBalance > type(uint128).max) revert DepositOverflow();
        // Booked before the external call so a re-entering collector sees the new state.
        channel.balance = uint128(newBalance);

        IERC20 token = IERC20(config.token);
        uint256 held = token.balanceOf(address(this));
        IDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        if (token.balanceOf(address(this)) != held + amount) revert DepositCollectionFailed();

        // A channel refunded to zero and funded again is announced again.
        if (channel.balance == amount && channel.totalClaimed == 0) emit ChannelCreated(channelId, config);
        emit Deposited(channelId, msg.sender, amount, channel.balance);
    }

    // --- claims and settlement ------------------------------------------------------------

    /// @notice Claim vouchers as each row's receiver or receiver authorizer.
    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        if (voucherClaims.length == 0) revert EmptyBatch();
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            ChannelConfig calldata config = voucherClaims[i].voucher.channel;
            if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) {
                revert NotAuthorizedToClaim();
            }
            _processVoucherClaim(voucherClaims[i]);
        }
    }

    /// @notice Claim vouchers on the receiver authorizer's `ClaimBatch` signature; anyone
    /// may relay it. One signature covers the batch, so every row must name that authorizer.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        if (voucherClaims.length == 0) revert EmptyBatch();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        bytes32 digest = getClaimBatchDigest(voucherClaims);
        if (!SignatureChecker.isValidSignatureNowCalldata(authorizer, digest, authorizerSignature)) {
            revert InvalidSignature();
        }
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert NotReceiverAuthorizer();
            _processVoucherClaim(voucherClaims[i]);
        }
    }

    /// @notice Pay `receiver` everything claimed for it in `token` and not yet paid.
    /// Permissionless: the money can only go to the receiver.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage state = receivers[receiver][token];
        uint128 amount = state.totalClaimed - state.totalSettled;
        if (amount == 0) return;
        state.totalSettled = state.totalClaimed;
        IERC20(token).safeTransfer(receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    /// @dev A row at or below what the chain already holds is skipped, so replaying a claim
    /// (or claiming inside a refund's multicall twice) moves nothing.
    function _processVoucherClaim(VoucherClaim calldata row) private {
        ChannelConfig calldata config = row.voucher.channel;
        bytes32 channelId = getChannelId(config);
        ChannelState storage channel = channels[channelId];
        if (row.totalClaimed <= channel.totalClaimed) return;
        if (row.totalClaimed > row.voucher.maxClaimableAmount) revert ClaimExceedsCeiling();
        if (row.totalClaimed > channel.balance) revert ClaimExceedsBalance();
        bytes32 digest = getVoucherDigest(channelId, row.voucher.maxClaimableAmount);
        if (!_isPayerSignature(config, digest, row.signature)) revert InvalidSignature();

        uint128 delta = row.totalClaimed - channel.totalClaimed;
        channel.totalClaimed = row.totalClaimed;
        receivers[config.receiver][config.token].totalClaimed += delta;
        emit Claimed(channelId, msg.sender, delta, row.totalClaimed);
    }

    /// @dev An EOA authorizer is checked by plain recovery (cheap, no call out); without
    /// one the payer itself must accept the signature (ERC-1271 smart wallets).
    function _isPayerSignature(ChannelConfig calldata config, bytes32 digest, bytes calldata signature)
        private
        view
        returns (bool)
    {
        if (config.payerAuthorizer != address(0)) {
            (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecoverCalldata(digest, signature);
            return err == ECDSA.RecoverError.NoError && signer == config.payerAuthorizer;
        }
        return SignatureChecker.isValidSignatureNowCalldata(config.payer, digest, signature);
    }

    // --- timed withdrawal (the payer's way out without the receiver) -----------------------

    /// @notice Announce a withdrawal of `amount`; it can be finalized after the channel's
    /// withdraw delay, during which the receiver can still claim what it is owed.
    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) revert InvalidChannel();
        if (amount == 0) revert NothingToWithdraw();
        bytes32 channelId = getChannelId(config);
        WithdrawalState storage pending = pendingWithdrawals[channelId];
        if (pending.initiatedAt != 0) revert WithdrawalAlreadyPending();
        ChannelState storage channel = channels[channelId];
        if (amount > channel.balance - channel.totalClaimed) revert WithdrawAmountExceedsAvailable();

        pending.amount = amount;
        pending.initiatedAt = uint40(block.timestamp);
        emit WithdrawInitiated(channelId, amount, uint40(block.timestamp) + config.withdrawDelay);
    }

    /// @notice Pay out a pending withdrawal once its delay has passed: what was announced,
    /// less anything claimed meanwhile. The money always goes to the payer.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) {
            revert NotAuthorizedToFinalizeWithdraw();
        }
        bytes32 channelId = getChannelId(config);
        WithdrawalState memory pending = pendingWithdrawals[channelId];
        if (pending.initiatedAt == 0) revert WithdrawalNotPending();
        if (block.timestamp < uint256(pending.initiatedAt) + config.withdrawDelay) revert WithdrawDelayNotElapsed();

        ChannelState storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 amount = pending.amount < available ? pending.amount : available;
        delete pendingWithdrawals[channelId];
        channel.balance -= amount;
        emit WithdrawFinalized(channelId, msg.sender, amount);
        _closeIfDrained(channelId, config, channel);
        if (amount > 0) IERC20(config.token).safeTransfer(config.payer, amount);
    }

    // --- cooperative refund ---------------------------------------------------------------

    /// @notice Return up to `amount` of the unclaimed balance to the payer, as the receiver
    /// or its authorizer.
    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiver && msg.sender != config.receiverAuthorizer) revert NotAuthorizedToRefund();
        _executeRefund(config, getChannelId(config), amount);
    }

    /// @notice Return up to `amount` to the payer on the receiver authorizer's `Refund`
    /// signature; anyone may relay it. The nonce makes each signature good for one refund.
    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        if (nonce != refundNonce[channelId]) revert InvalidRefundNonce();
        bytes32 digest = getRefundDigest(channelId, nonce, amount);
        if (!SignatureChecker.isValidSignatureNowCalldata(config.receiverAuthorizer, digest, receiverAuthorizerSignature))
        {
            revert InvalidSignature();
        }
        _executeRefund(config, channelId, amount);
    }

    /// @dev The nonce advances even when nothing is left to refund, so a signed refund can
    /// never be held back and replayed after a later deposit.
    function _executeRefund(ChannelConfig calldata config, bytes32 channelId, uint128 amount) private {
        if (amount == 0) revert ZeroRefund();
        refundNonce[channelId]++;
        ChannelState storage channel = channels[channelId];
        uint128 available = channel.balance - channel.totalClaimed;
        uint128 refunded = amount < available ? amount : available;
        if (refunded == 0) return;
        channel.balance -= refunded;

        // A pending withdrawal only ever covers unclaimed money, which just shrank.
        WithdrawalState storage pending = pendingWithdrawals[channelId];
        if (pending.initiatedAt != 0) {
            if (refunded >= pending.amount) delete pendingWithdrawals[channelId];
            else pending.amount -= refunded;
        }
        emit Refunded(channelId, msg.sender, refunded);
        _closeIfDrained(channelId, config, channel);
        IERC20(config.token).safeTransfer(config.payer, refunded);
    }

    function _closeIfDrained(bytes32 channelId, ChannelConfig calldata config, ChannelState storage channel) private {
        if (channel.balance == 0 && channel.totalClaimed == 0) emit ChannelClosed(channelId, config);
    }

    // --- EIP-712 views ----------------------------------------------------------------------

    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(CHANNEL_CONFIG_TYPEHASH, config)));
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    /// @notice The digest the receiver authorizer signs for a batch: EIP-712 `ClaimBatch`
    /// over one `ClaimEntry(channelId, maxClaimableAmount, totalClaimed)` per row.
    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            VoucherClaim calldata row = voucherClaims[i];
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH,
                    getChannelId(row.voucher.channel),
                    row.voucher.maxClaimableAmount,
                    row.totalClaimed
                )
            );
        }
        return _hashTypedDataV4(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }
}
