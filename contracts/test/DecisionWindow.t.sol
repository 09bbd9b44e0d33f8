// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev The decision window: an epoch the client ended still gets the accept of its next
///      checkpoint paid for `decisionWindow`, and nothing else of it lands.
contract DecisionWindowTest is EscrowFixture {
    uint256 internal jobId;
    IERC20 internal token;

    function setUp() public override {
        super.setUp();
        token = IERC20(address(usdc));
        jobId = _defaultJob(); // 400 steps, interval 50
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
    }

    function _release() internal {
        vm.prank(client);
        escrow.releaseProvider(jobId);
    }

    function _late(uint64 epoch, uint64 step) internal {
        escrow.acceptCheckpoint(jobId, epoch, step, _ckpt(step), _quorumVotes(jobId, epoch, step, _ckpt(step), true));
    }

    function test_release_keepsRecord() public {
        _release();
        (address p, uint256 price, uint64 stepAtEnd, uint64 windowEnd) = escrow.closedEpoch(jobId, 1);
        assertEq(p, provider, "provider");
        assertEq(price, 1000, "price");
        assertEq(stepAtEnd, 0, "head at the end");
        assertEq(windowEnd, uint64(block.timestamp) + DECISION_WINDOW, "window end");
    }

    function test_lateAccept_afterRelease_paysTheEndedEpoch() public {
        _release();
        vm.warp(block.timestamp + DECISION_WINDOW); // the last second of the window
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50 * 1000, _bits(jobId, v1, v2), 2 * FEE);
        _late(1, 50);
        assertEq(escrow.withdrawable(provider, token), 50 * 1000, "paid at its price");
        assertEq(_paid(jobId, v1), 1, "the signers earn their fees");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.lastAcceptedStep, 50, "head moved");
        assertEq(j.lastCheckpointHash, _ckpt(50), "head hash");
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "still open");
        assertEq(j.remaining, 5e6 - 50 * 1000 - 2 * FEE, "budget spent once, fees included");
        (address p,,,) = escrow.closedEpoch(jobId, 1);
        assertEq(p, address(0), "the record is used up");
        // the next epoch starts from the new head
        _assign(jobId, PROVIDER2_PK, 900);
        _accept(jobId, 100, _ckpt(100));
        assertEq(escrow.withdrawable(provider2, token), 50 * 900, "the next epoch pays from step 50 on");
    }

    function test_lateAccept_once() public {
        _release();
        _late(1, 50);
        bytes[] memory again = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), again);
    }

    function test_lateAccept_refusedAfterWindow() public {
        _release();
        uint64 windowEnd = uint64(block.timestamp) + DECISION_WINDOW;
        vm.warp(uint256(windowEnd) + 1);
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WindowClosed.selector, windowEnd));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_lateAccept_refusedPastGrace() public {
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        vm.warp(uint256(j.deadline) - 1);
        _release();
        vm.warp(uint256(j.deadline) + j.grace + 1);
        // the window is ten minutes, the grace an hour: the window is over first
        (,,, uint64 windowEnd) = escrow.closedEpoch(jobId, 1);
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WindowClosed.selector, windowEnd));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    /// A window longer than the grace still ends with the job's grace.
    function test_lateAccept_refusedPastGrace_longWindow() public {
        JobEscrow long = new JobEscrow(token, MIN_STAKE, UNBOND_DELAY, MAX_DURATION, MAX_GRACE, 30 days, MIN_VERIFIER_STAKE);
        escrow = long;
        _fund(client, 10e6);
        _fund(provider, MIN_STAKE);
        _stakeVerifier(v1, MIN_VERIFIER_STAKE);
        _stakeVerifier(v2, MIN_VERIFIER_STAKE);
        _stakeVerifier(v3, MIN_VERIFIER_STAKE);
        _register(provider, MIN_STAKE);
        jobId = _defaultJob();
        _assign(jobId, PROVIDER_PK, 1000);
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        _release();
        vm.warp(uint256(j.deadline) + j.grace + 1);
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooLate.selector));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    /// Fencing: only the next checkpoint after the head the epoch ended at, not work it
    /// could have done after it was fenced.
    function test_lateAccept_onlyTheNextCheckpoint() public {
        _release();
        bytes[] memory sigs = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BeyondNextCheckpoint.selector, 100));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), sigs);
        sigs = _quorumVotes(jobId, 1, 60, _ckpt(60), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 60));
        escrow.acceptCheckpoint(jobId, 1, 60, _ckpt(60), sigs);
        sigs = _quorumVotes(jobId, 1, 0, _ckpt(0), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepNotIncreasing.selector, 0, 0));
        escrow.acceptCheckpoint(jobId, 1, 0, _ckpt(0), sigs);
    }

    /// Once the head moved past where the epoch ended, its checkpoint no longer extends it.
    function test_lateAccept_refusedAfterTheHeadMoved() public {
        _assign(jobId, PROVIDER2_PK, 1000); // epoch 1 replaced at head 0
        _accept(jobId, 50, _ckpt(50)); // epoch 2 moves the head
        bytes[] memory sigs = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.MovedOn.selector, 50, 0));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), sigs);
    }

    /// A late accept supersedes the live epoch that started from the old head: it ends
    /// without a slash, its reservation is released, and the job is open again.
    function test_lateAccept_supersedesLiveEpoch() public {
        _assign(jobId, PROVIDER2_PK, 1000);
        (uint256 bonded2,,,) = escrow.stakeOf(provider2);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50 * 1000, _bits(jobId, v1, v2), 2 * FEE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 2, JobEscrow.EndReason.Superseded);
        _late(1, 50);
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "open for a new epoch");
        (uint256 bondedAfter,,, uint32 live2) = escrow.stakeOf(provider2);
        assertEq(bondedAfter, bonded2, "no slash");
        assertEq(live2, 0, "reservation released");
        // the superseded epoch's own votes are dead: no record for it
        bytes[] memory sigs = _quorumVotes(jobId, 2, 100, _ckpt(100), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(jobId, 2, 100, _ckpt(100), sigs);
    }

    function test_lateAccept_finalStepCompletes() public {
        _release(); // the fixture's job holds provider's only reservation
        uint256 small = _createJob(1e6, 10_000, 60, 50);
        _assign(small, PROVIDER2_PK, 1000);
        escrow.acceptCheckpoint(small, 1, 50, _ckpt(50), _quorumVotes(small, 1, 50, _ckpt(50), true));
        _assign(small, PROVIDER_PK, 1000); // replaces provider2 at head 50
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(small, 2, JobEscrow.EndReason.Superseded);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(small, 1e6 - 60 * 1000 - 4 * FEE);
        escrow.acceptCheckpoint(small, 1, 60, _ckpt(60), _quorumVotes(small, 1, 60, _ckpt(60), true));
        assertEq(uint256(escrow.getJob(small).status), uint256(JobEscrow.Status.Completed), "completed");
        assertEq(escrow.withdrawable(provider2, token), 60 * 1000, "every step paid once");
        (,,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "the superseded provider holds nothing");
        escrow.settle(small);
        assertEq(escrow.withdrawable(client, token), 1e6 - 60 * 1000 - 4 * FEE, "refund: the rest");
    }

    /// No window for epochs the client did not end.
    function test_noRecord_forRejectResignOrExpiry() public {
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), _allVotes(jobId, 1, 50, _ckpt(50), false));
        (address p,,,) = escrow.closedEpoch(jobId, 1);
        assertEq(p, address(0), "rejected: no record");
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);

        _assign(jobId, PROVIDER2_PK, 1000);
        vm.prank(provider2);
        escrow.resign(jobId);
        (p,,,) = escrow.closedEpoch(jobId, 2);
        assertEq(p, address(0), "resigned: no record");
    }

    /// A late reject never lands: the client stopped paying the epoch, and its provider's
    /// reservation is free (it may be unbonding).
    function test_lateReject_refused() public {
        _release();
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), false);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        assertEq(escrow.burned(), 0, "nothing slashed");
    }

    /// The window takes the same quorum as a live decision.
    function test_lateAccept_needsQuorumOfVerifiers() public {
        _release();
        uint256[] memory one = new uint256[](1);
        one[0] = V1_PK;
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), true, one);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 1, 2));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        sigs = _votes(jobId, 1, 50, _ckpt(50), true, _pks(V1_PK, OUTSIDER_PK));
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }
}
