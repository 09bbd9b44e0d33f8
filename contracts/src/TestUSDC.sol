// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title TestUSDC
/// @notice A 6-decimal ERC-20 for local and public testnets. Anyone may mint: it
///         has no value, and the demo and tests fund their accounts with it.
contract TestUSDC is ERC20 {
    constructor() ERC20("Test USDC", "tUSDC") {}

    /// @notice USDC's unit: 1 token = 1_000_000 smallest units.
    function decimals() public pure override returns (uint8) {
        return 6;
    }

    /// @notice Mints `amount` smallest units to `to`. Testnets only.
    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
