// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";

/// @dev One call per test with everything signed in setUp. Isolated: every call is its own
///      transaction (cold storage, intrinsic and calldata gas included), so the named
///      snapshots in snapshots/GasTest.json are what a node pays on chain.
contract GasTest is EscrowFixture {
    uint256 internal jobId;
    bytes[] internal firstVotes;
    bytes[] internal nextVotes;
    bytes[] internal finalVotes;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        firstVotes = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        nextVotes = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        finalVotes = _quorumVotes(jobId, 1, 400, _ckpt(400), true);
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
    /// The final checkpoint also completes the job and credits the refund.
    function test_gas_acceptCheckpoint_2votes_final() public {
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), finalVotes);
        uint256 used = vm.snapshotGasLastCall("acceptCheckpoint_2votes_final");
        // completion also credits the client's refund, usually to a fresh balance slot (22k)
        assertTrue(used <= 130_000, "final acceptCheckpoint with 2 votes over 130k gas");
    }
}
