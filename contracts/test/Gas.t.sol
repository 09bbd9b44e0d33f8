// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev One call per test with everything signed in setUp. Isolated: every call is its own
///      transaction (cold storage, intrinsic and calldata gas included), so the named
///      snapshots in snapshots/GasTest.json are what a node pays on chain. The job is the
///      demo's: a drawn committee of 3, quorum 2, a fee per signer, decisions carrying 2 votes.
contract GasTest is EscrowFixture {
    uint256 internal jobId;
    bytes[] internal firstVotes;
    bytes[] internal nextVotes;
    bytes[] internal finalVotes;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        assertEq(escrow.getJob(jobId).committee.length, 3, "committee of 3");
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        firstVotes = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        nextVotes = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        finalVotes = _quorumVotes(jobId, 1, 400, _ckpt(400), true);
        assertEq(firstVotes.length, 2, "2 votes");
    }

    /// forge-config: default.isolate = true
    /// The first payout to a provider: its balance slot goes from zero to non-zero.
    function test_gas_acceptCheckpoint_2votes_first() public {
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), firstVotes);
        uint256 used = vm.snapshotGasLastCall("acceptCheckpoint_2votes_first");
        assertTrue(used <= 100_000, "acceptCheckpoint with 2 votes over 100k gas");
    }

    /// forge-config: default.isolate = true
    /// The steady state: every later checkpoint of the job.
    function test_gas_acceptCheckpoint_2votes_next() public {
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), firstVotes);
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), nextVotes);
        uint256 used = vm.snapshotGasLastCall("acceptCheckpoint_2votes_next");
        assertTrue(used <= 100_000, "acceptCheckpoint with 2 votes over 100k gas");
    }

    /// forge-config: default.isolate = true
    /// The final checkpoint also completes the job and ends the epoch, here as the provider's
    /// first payout too (the dearest case); the refund and the fees wait for `settle`.
    function test_gas_acceptCheckpoint_2votes_final() public {
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), finalVotes);
        uint256 used = vm.snapshotGasLastCall("acceptCheckpoint_2votes_final");
        assertTrue(used <= 100_000, "final acceptCheckpoint with 2 votes over 100k gas");
    }

    /// forge-config: default.isolate = true
    /// The same while the provider holds another epoch: its stake slot stays non-zero, so
    /// ending this epoch earns no refund. The bound must hold without one.
    function test_gas_acceptCheckpoint_2votes_final_otherEpochLive() public {
        uint256 other = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(other, PROVIDER_PK, 1000);
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), finalVotes);
        uint256 used = vm.snapshotGasLastCall("acceptCheckpoint_2votes_final_otherEpochLive");
        assertTrue(used <= 100_000, "final acceptCheckpoint with 2 votes over 100k gas without the refund");
    }

    /// forge-config: default.isolate = true
    /// A reject by a quorum that is not the whole committee: the epoch ends, no slash, the
    /// signers' fees come from the slack.
    function test_gas_rejectCheckpoint_2votes() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, keccak256("junk"), false);
        escrow.rejectCheckpoint(jobId, 1, 50, keccak256("junk"), sigs);
        vm.snapshotGasLastCall("rejectCheckpoint_2votes");
    }

    /// forge-config: default.isolate = true
    /// A unanimous reject: the slash is burned as well.
    function test_gas_rejectCheckpoint_3votes_unanimous() public {
        bytes[] memory sigs = _allVotes(jobId, 1, 50, keccak256("junk"), false);
        escrow.rejectCheckpoint(jobId, 1, 50, keccak256("junk"), sigs);
        vm.snapshotGasLastCall("rejectCheckpoint_3votes_unanimous");
    }

    /// forge-config: default.isolate = true
    /// What completion no longer pays: the fees of the two signers and the client's refund,
    /// credited to (usually fresh) balance slots.
    function test_gas_settle() public {
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), finalVotes);
        escrow.settle(jobId);
        vm.snapshotGasLastCall("settle");
    }

    /// forge-config: default.isolate = true
    function test_gas_createJob() public {
        vm.prank(client);
        escrow.createJob(
            IERC20(address(usdc)),
            5e6,
            10_000,
            400,
            50,
            keccak256("spec"),
            COMMITTEE,
            QUORUM,
            FEE,
            uint64(block.timestamp) + DEADLINE_IN,
            GRACE
        );
        vm.snapshotGasLastCall("createJob");
    }

    /// forge-config: default.isolate = true
    /// A committee of 3 from a pool of 3: the probe walks past taken entries.
    function test_gas_drawCommittee_3of3() public {
        uint256 id = _createUndrawn(5e6, 10_000, 400, 50);
        vm.roll(block.number + 1);
        escrow.drawCommittee(id);
        vm.snapshotGasLastCall("drawCommittee_3of3");
    }

    /// forge-config: default.isolate = true
    /// A committee of 3 from a pool of 10.
    function test_gas_drawCommittee_3of10() public {
        for (uint256 i; i < 7; ++i) {
            _stakeVerifier(vm.addr(0xF00 + i), MIN_VERIFIER_STAKE);
        }
        assertEq(escrow.poolSize(), 10, "pool of 10");
        uint256 id = _createUndrawn(5e6, 10_000, 400, 50);
        vm.roll(block.number + 1);
        escrow.drawCommittee(id);
        vm.snapshotGasLastCall("drawCommittee_3of10");
    }

    /// forge-config: default.isolate = true
    function test_gas_registerVerifier() public {
        address who = vm.addr(0xF00);
        _fund(who, MIN_VERIFIER_STAKE);
        vm.prank(who);
        escrow.registerVerifier(MIN_VERIFIER_STAKE);
        vm.snapshotGasLastCall("registerVerifier");
    }

    /// A chain refuses to deploy runtime code over EIP-170's 24,576 bytes; forge's own test
    /// deployments do not enforce it, so this does.
    function test_runtimeCode_fitsEip170() public view {
        uint256 size = address(escrow).code.length;
        assertTrue(size <= 24_576, "JobEscrow runtime code over EIP-170's 24,576 bytes");
    }
}
