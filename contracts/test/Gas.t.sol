// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev One call per test with everything signed in setUp. Isolated: every call is its own
///      transaction (cold storage, intrinsic and calldata gas included), so the named
///      snapshots in snapshots/GasTest.json are what a node pays on chain. The job is the
///      demo's: a committee of 3 verifiers, quorum 2, decisions carrying 2 votes.
contract GasTest is EscrowFixture {
    uint256 internal jobId;
    bytes[] internal firstVotes;
    bytes[] internal nextVotes;
    bytes[] internal finalVotes;

    function setUp() public override {
        super.setUp();
        address[] memory committee = _verifiers();
        assertEq(committee.length, 3, "committee of 3");
        vm.prank(client);
        jobId = escrow.createJob(
            IERC20(address(usdc)),
            5e6,
            10_000,
            400,
            50,
            keccak256("spec"),
            committee,
            2,
            uint64(block.timestamp) + DEADLINE_IN,
            GRACE
        );
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
    /// first payout too (the dearest case); the refund waits for `settle`.
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
    /// What completion no longer pays: the client's refund credit, usually a fresh slot.
    function test_gas_settle() public {
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), finalVotes);
        escrow.settle(jobId);
        vm.snapshotGasLastCall("settle");
    }
}
