// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @dev The cheatcodes this suite uses. forge serves them natively at this address;
///      npm's forge-std does not compile, so we declare only what we call.
interface Vm {
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function addr(uint256 privateKey) external pure returns (address);
    function prank(address sender) external;
    function startPrank(address sender) external;
    function stopPrank() external;
    function warp(uint256 timestamp) external;
    function roll(uint256 blockNumber) external;
    function setBlockhash(uint256 blockNumber, bytes32 blockHash) external;
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory logs);
    function chainId(uint256 newChainId) external;
    function etch(address target, bytes calldata code) external;
    function expectRevert(bytes calldata revertData) external;
    function expectPartialRevert(bytes4 selector) external;
    function expectEmit() external;
    function expectEmit(address emitter) external;
    function assume(bool condition) external pure;
    function readFile(string calldata path) external view returns (string memory);
    function parseJsonBytes32(string calldata json, string calldata key) external pure returns (bytes32);
    function parseJsonBytes(string calldata json, string calldata key) external pure returns (bytes memory);
    function parseJsonAddress(string calldata json, string calldata key) external pure returns (address);
    function parseJsonUint(string calldata json, string calldata key) external pure returns (uint256);
    function parseJsonBool(string calldata json, string calldata key) external pure returns (bool);
    function parseJsonString(string calldata json, string calldata key) external pure returns (string memory);
    function snapshotGasLastCall(string calldata name) external returns (uint256 gasUsed);
    function snapshotState() external returns (uint256 snapshotId);
    function revertToState(uint256 snapshotId) external returns (bool success);
}

abstract contract Base {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// secp256k1 group order: an s above n/2 is the malleable twin of a valid signature.
    uint256 internal constant SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;

    error AssertionFailed(string what);
    error NotEqualUint(string what, uint256 left, uint256 right);
    error NotEqualBytes32(string what, bytes32 left, bytes32 right);
    error NotEqualAddress(string what, address left, address right);

    function assertTrue(bool condition, string memory what) internal pure {
        if (!condition) revert AssertionFailed(what);
    }

    function assertEq(uint256 left, uint256 right, string memory what) internal pure {
        if (left != right) revert NotEqualUint(what, left, right);
    }

    function assertEq(bytes32 left, bytes32 right, string memory what) internal pure {
        if (left != right) revert NotEqualBytes32(what, left, right);
    }

    function assertEq(address left, address right, string memory what) internal pure {
        if (left != right) revert NotEqualAddress(what, left, right);
    }

    function assertEq(bytes memory left, bytes memory right, string memory what) internal pure {
        if (keccak256(left) != keccak256(right)) revert AssertionFailed(what);
    }

    /// @dev Maps any fuzz input onto [lo, hi] without discarding runs.
    function bound(uint256 x, uint256 lo, uint256 hi) internal pure returns (uint256) {
        require(lo <= hi, "bound: lo > hi");
        if (lo == 0 && hi == type(uint256).max) return x;
        return lo + (x % (hi - lo + 1));
    }

    /// @dev 65 bytes r ‖ s ‖ v, as the escrow takes them.
    function signDigest(uint256 pk, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(pk, digest);
        return abi.encodePacked(r, s, v);
    }

    /// @dev The same signature with s' = n - s and the other v: valid for ecrecover,
    ///      and exactly what a low-s check must refuse.
    function malleate(bytes memory sig) internal pure returns (bytes memory) {
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly {
            r := mload(add(sig, 32))
            s := mload(add(sig, 64))
            v := byte(0, mload(add(sig, 96)))
        }
        return abi.encodePacked(r, bytes32(SECP256K1_N - uint256(s)), v == 27 ? uint8(28) : uint8(27));
    }
}
