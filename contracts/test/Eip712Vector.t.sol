// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @dev The shared vector (made with an independent implementation) against the contract's
///      own hashing and recovery, at the vector's chain id and address.
contract Eip712VectorTest is EscrowFixture {
    string internal json;
    JobEscrow internal at;

    function setUp() public override {
        super.setUp();
        json = vm.readFile("test/vectors/eip712.json");
        assertEq(vm.parseJsonString(json, ".domain.name"), "GpuChain JobEscrow", "domain name");
        vm.chainId(vm.parseJsonUint(json, ".domain.chainId"));
        address where = vm.parseJsonAddress(json, ".domain.verifyingContract");
        // EIP712 keeps the deploy-time address in an immutable and rebuilds the separator
        // when running elsewhere, so the runtime code alone is enough at the vector's address.
        vm.etch(where, address(escrow).code);
        at = JobEscrow(where);
    }

    function assertEq(string memory left, string memory right, string memory what) internal pure {
        assertTrue(keccak256(bytes(left)) == keccak256(bytes(right)), what);
    }

    function test_vector_typehashesAndDomain() public view {
        assertEq(at.BID_TYPEHASH(), vm.parseJsonBytes32(json, ".bidTypehash"), "bid typehash");
        assertEq(at.VOTE_TYPEHASH(), vm.parseJsonBytes32(json, ".voteTypehash"), "vote typehash");
        assertEq(at.domainSeparator(), vm.parseJsonBytes32(json, ".domainSeparator"), "domain separator");
        // the deployed copy elsewhere must differ: the address is part of the domain
        assertTrue(escrow.domainSeparator() != at.domainSeparator(), "address bound");
    }

    function test_vector_bid() public view {
        bytes32 terms = vm.parseJsonBytes32(json, ".bid.message.terms");
        assertEq(terms, bytes32(0x5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c), "bid terms");
        bytes32 digest = at.hashBid(
            vm.parseJsonUint(json, ".bid.message.jobId"),
            terms,
            uint64(vm.parseJsonUint(json, ".bid.message.epoch")),
            vm.parseJsonAddress(json, ".bid.message.provider"),
            vm.parseJsonUint(json, ".bid.message.pricePerStep"),
            uint64(vm.parseJsonUint(json, ".bid.message.expiry"))
        );
        assertEq(digest, vm.parseJsonBytes32(json, ".bid.digest"), "bid digest");
        bytes memory sig = vm.parseJsonBytes(json, ".bid.signature");
        uint256 key = vm.parseJsonUint(json, ".bid.signerKey");
        assertEq(ECDSA.recover(digest, sig), vm.parseJsonAddress(json, ".bid.message.provider"), "bid signer");
        assertEq(vm.addr(key), vm.parseJsonAddress(json, ".bid.message.provider"), "bid key");
        // RFC 6979 signing is deterministic: forge's signer must give the vector's bytes
        assertEq(signDigest(key, digest), sig, "bid signature bytes");
    }

    function test_vector_votes() public view {
        for (uint256 i; i < 3; ++i) {
            string memory p = string.concat(".votes[", _digit(i), "]");
            bytes32 digest = at.hashVote(
                vm.parseJsonUint(json, string.concat(p, ".message.jobId")),
                uint64(vm.parseJsonUint(json, string.concat(p, ".message.epoch"))),
                uint64(vm.parseJsonUint(json, string.concat(p, ".message.step"))),
                vm.parseJsonBytes32(json, string.concat(p, ".message.checkpointHash")),
                vm.parseJsonBool(json, string.concat(p, ".message.accept"))
            );
            assertEq(digest, vm.parseJsonBytes32(json, string.concat(p, ".digest")), "vote digest");
            bytes memory sig = vm.parseJsonBytes(json, string.concat(p, ".signature"));
            address signer = vm.parseJsonAddress(json, string.concat(p, ".signer"));
            assertEq(ECDSA.recover(digest, sig), signer, "vote signer");
            uint256 key = vm.parseJsonUint(json, string.concat(p, ".signerKey"));
            assertEq(signDigest(key, digest), sig, "vote signature bytes");
        }
    }

    function _digit(uint256 i) internal pure returns (string memory) {
        return string(abi.encodePacked(bytes1(uint8(48 + i))));
    }
}
