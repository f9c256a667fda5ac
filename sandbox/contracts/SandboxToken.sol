// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/// @title SandboxToken
/// @notice Six-decimal ERC-20 with EIP-2612 permit, used only on the local
/// sandbox chain. The deployer owns it and funds test wallets with `mint`.
/// The EIP-712 domain is {name: name(), version: "1"}.
contract SandboxToken is ERC20, ERC20Permit, Ownable {
    constructor(string memory name_, string memory symbol_)
        ERC20(name_, symbol_)
        ERC20Permit(name_)
        Ownable(msg.sender)
    {}

    /// @notice Six decimals, like the fiat-backed stablecoins it stands in for.
    function decimals() public pure override returns (uint8) {
        return 6;
    }

    /// @notice Create `amount` atomic units for `to`. Owner only.
    function mint(address to, uint256 amount) external onlyOwner {
        _mint(to, amount);
    }
}
