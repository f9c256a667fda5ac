// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

/// @title SandboxMulticall3
/// @notice The part of the well-known Multicall3 interface that x402 facilitators use to
/// read several contract values in one `eth_call` (`tryAggregate`, `aggregate3`,
/// `getEthBalance`); the sandbox sets it at Multicall3's canonical address, where public
/// chains have it and a fresh anvil has nothing.
contract SandboxMulticall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    function tryAggregate(bool requireSuccess, Call[] calldata calls) public payable returns (Result[] memory results) {
        results = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory returnData) = calls[i].target.call(calls[i].callData);
            require(success || !requireSuccess, "Multicall3: call failed");
            results[i] = Result(success, returnData);
        }
    }

    function aggregate3(Call3[] calldata calls) public payable returns (Result[] memory results) {
        results = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool success, bytes memory returnData) = calls[i].target.call(calls[i].callData);
            require(success || calls[i].allowFailure, "Multicall3: call failed");
            results[i] = Result(success, returnData);
        }
    }

    function getEthBalance(address account) public view returns (uint256) {
        return account.balance;
    }
}
