// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {TestUSDC} from "../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

contract TestUSDCTest is EscrowFixture {
    function test_decimalsAndMint() public {
        assertEq(usdc.decimals(), 6, "decimals");
        uint256 before = usdc.balanceOf(outsider);
        usdc.mint(outsider, 123);
        assertEq(usdc.balanceOf(outsider), before + 123, "minted");
    }
}

contract ConstructorTest is EscrowFixture {
    function test_constructor_setsParameters() public view {
        assertEq(address(escrow.stakeToken()), address(usdc), "stake token");
        assertEq(escrow.minStake(), MIN_STAKE, "min stake");
        assertEq(escrow.unbondDelay(), UNBOND_DELAY, "delay");
    }

    function test_constructor_revertsOnZeroToken() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAddress.selector));
        new JobEscrow(IERC20(address(0)), MIN_STAKE, UNBOND_DELAY);
    }

    function test_constructor_revertsOnZeroMinStake() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        new JobEscrow(IERC20(address(usdc)), 0, UNBOND_DELAY);
    }
}

contract CreateJobTest is EscrowFixture {
    function test_createJob_pullsBudgetAndStoresJob() public {
        uint256 before = usdc.balanceOf(client);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCreated(
            1,
            client,
            address(usdc),
            5e6,
            10_000,
            400,
            50,
            keccak256("spec"),
            _verifiers(),
            2,
            uint64(block.timestamp) + DEADLINE_IN,
            GRACE
        );
        uint256 jobId = _defaultJob();
        assertEq(jobId, 1, "first id");
        assertEq(usdc.balanceOf(client), before - 5e6, "client paid");
        assertEq(usdc.balanceOf(address(escrow)), 5e6, "escrow holds");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.client, client, "client");
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "open");
        assertEq(j.deposit, 5e6, "deposit");
        assertEq(j.remaining, 5e6, "remaining");
        assertEq(j.verifiers.length, 3, "verifiers");
        assertTrue(escrow.isVerifier(jobId, v2), "v2 listed");
        assertTrue(!escrow.isVerifier(jobId, outsider), "outsider not listed");
        assertEq(_defaultJob(), 2, "ids increase");
    }

    function _create(
        address token,
        uint256 budget,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        address[] memory vs,
        uint8 quorum,
        uint64 deadline
    ) internal {
        vm.prank(client);
        escrow.createJob(IERC20(token), budget, maxPrice, total, interval, bytes32(0), vs, quorum, deadline, GRACE);
    }

    function test_createJob_reverts_badArguments() public {
        address[] memory vs = _verifiers();
        uint64 dl = uint64(block.timestamp) + 100;
        address t = address(usdc);

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAddress.selector));
        _create(address(0), 1e6, 1, 10, 5, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _create(t, 0, 1, 10, 5, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _create(t, 1e6, 0, 10, 5, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _create(t, uint256(type(uint128).max) + 1, 1, 10, 5, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 0, 0, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 10, 0, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 10, 11, vs, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(t, 1e6, 1, 10, 5, new address[](0), 1, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(t, 1e6, 1, 10, 5, new address[](33), 1, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, vs, 0, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, vs, 4, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector));
        _create(t, 1e6, 1, 10, 5, vs, 2, uint64(block.timestamp));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BudgetTooSmall.selector, 999, 1000));
        _create(t, 999, 100, 10, 5, vs, 2, dl);
    }

    function test_createJob_reverts_duplicateOrZeroVerifier() public {
        address[] memory vs = _verifiers();
        vs[2] = v1;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(address(usdc), 1e6, 1, 10, 5, vs, 2, uint64(block.timestamp) + 100);
        vs[2] = address(0);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(address(usdc), 1e6, 1, 10, 5, vs, 2, uint64(block.timestamp) + 100);
    }

    function test_createJob_reverts_feeOnTransferToken() public {
        FeeToken fee = new FeeToken();
        fee.mint(client, 10e6);
        vm.prank(client);
        fee.approve(address(escrow), type(uint256).max);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DepositMismatch.selector, 1e6 - 1e4, 1e6));
        _create(address(fee), 1e6, 1, 10, 5, _verifiers(), 2, uint64(block.timestamp) + 100);
    }

    function test_getJob_revertsOnUnknownJob() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 42));
        escrow.getJob(42);
    }
}

contract StakeTest is EscrowFixture {
    function test_register_addsStake() public {
        vm.expectEmit(address(escrow));
        emit JobEscrow.Staked(provider, MIN_STAKE, MIN_STAKE);
        _register(provider, MIN_STAKE);
        _register(provider, 5);
        (uint256 amount, uint64 unbondAt, uint32 live) = escrow.stakeOf(provider);
        assertEq(amount, MIN_STAKE + 5, "stake");
        assertEq(unbondAt, 0, "bonded");
        assertEq(live, 0, "no epochs");
        assertEq(usdc.balanceOf(address(escrow)), MIN_STAKE + 5, "held");
    }

    function test_register_revertsOnZero() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _register(provider, 0);
    }

    function test_register_revertsWhileUnbonding() public {
        _register(provider, MIN_STAKE);
        vm.prank(provider);
        escrow.requestUnbond();
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnbondPending.selector));
        _register(provider, 1);
    }

    function test_unbond_fullCycle() public {
        _register(provider, MIN_STAKE);
        uint256 before = usdc.balanceOf(provider);
        vm.prank(provider);
        vm.expectEmit(address(escrow));
        emit JobEscrow.UnbondRequested(provider, MIN_STAKE, uint64(block.timestamp) + UNBOND_DELAY);
        escrow.requestUnbond();

        vm.warp(block.timestamp + UNBOND_DELAY - 1);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, block.timestamp + 1));
        escrow.withdrawStake();

        vm.warp(block.timestamp + 1);
        vm.prank(provider);
        vm.expectEmit(address(escrow));
        emit JobEscrow.StakeWithdrawn(provider, MIN_STAKE);
        escrow.withdrawStake();
        assertEq(usdc.balanceOf(provider), before + MIN_STAKE, "stake back");
        (uint256 amount, uint64 unbondAt,) = escrow.stakeOf(provider);
        assertEq(amount + unbondAt, 0, "cleared");

        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotUnbonding.selector));
        escrow.withdrawStake();
    }

    function test_requestUnbond_reverts() public {
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.requestUnbond();

        _register(provider, MIN_STAKE);
        uint256 jobId = _defaultJob();
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.LiveEpochs.selector, 1));
        escrow.requestUnbond();

        vm.prank(client);
        escrow.releaseProvider(jobId);
        vm.prank(provider);
        escrow.requestUnbond();
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnbondPending.selector));
        escrow.requestUnbond();
    }

    function test_withdrawStake_revertsWhenNotUnbonding() public {
        _register(provider, MIN_STAKE);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotUnbonding.selector));
        escrow.withdrawStake();
    }
}

contract AssignTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
    }

    function test_assign_opensEpochOne() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ProviderAssigned(jobId, 1, provider, 1000, 0, keccak256("spec"));
        vm.prank(client);
        escrow.assign(jobId, provider, 1000, expiry, sig);
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.epoch, 1, "epoch");
        assertEq(j.provider, provider, "provider");
        assertEq(j.pricePerStep, 1000, "price");
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Assigned), "assigned");
        (,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 1, "live epoch");
    }

    function test_assign_replacementEndsPreviousEpochAndStartsAtLastAccepted() public {
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 50, _ckpt(50));
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER2_PK, jobId, 2, 900, expiry);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Replaced);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ProviderAssigned(jobId, 2, provider2, 900, 50, _ckpt(50));
        vm.prank(client);
        escrow.assign(jobId, provider2, 900, expiry, sig);
        (,, uint32 live1) = escrow.stakeOf(provider);
        (,, uint32 live2) = escrow.stakeOf(provider2);
        assertEq(live1, 0, "old provider released");
        assertEq(live2, 1, "new provider live");
    }

    function test_assign_revertsForNonClient() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotClient.selector));
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnUnknownJob() public {
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 99));
        escrow.assign(99, provider, 1000, uint64(block.timestamp), "");
    }

    function test_assign_revertsOnExpiredBid() public {
        uint64 expiry = uint64(block.timestamp) + 10;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.warp(expiry + 1);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BidExpired.selector, expiry));
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnPrice() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 10_001, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.PriceTooHigh.selector, 10_001, 10_000));
        escrow.assign(jobId, provider, 10_001, expiry, sig);
        sig = _bidSig(PROVIDER_PK, jobId, 1, 0, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.assign(jobId, provider, 0, expiry, sig);
    }

    function test_assign_revertsOnInsufficientOrUnbondingStake() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(OUTSIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, 0, MIN_STAKE));
        escrow.assign(jobId, outsider, 1000, expiry, sig);

        vm.prank(provider);
        escrow.requestUnbond();
        sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnbondPending.selector));
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnBidSignedByAnother() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes32 digest = escrow.hashBid(jobId, 1, provider, 1000, expiry);
        bytes memory sig = signDigest(PROVIDER2_PK, digest);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongSigner.selector, provider2, provider));
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnBidAltered() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 999, expiry, sig);
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 1000, expiry + 1, sig);
    }

    function test_assign_revertsOnBidReplayedIntoAnotherEpoch() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        escrow.assign(jobId, provider, 1000, expiry, sig);
        // the same bid again would open epoch 2, which it does not name
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnBidReplayedAcrossJobs() public {
        uint256 other = _defaultJob();
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(other, provider, 1000, expiry, sig);
    }

    function test_assign_revertsOnHighSOrBadLength() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BadSignature.selector, 0));
        escrow.assign(jobId, provider, 1000, expiry, malleate(sig));
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BadSignature.selector, 0));
        escrow.assign(jobId, provider, 1000, expiry, bytes.concat(sig, hex"00"));
    }

    function test_assign_revertsAfterDeadlineAndWhenFinished() public {
        vm.warp(block.timestamp + DEADLINE_IN);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector));
        escrow.assign(jobId, provider, 1000, expiry, sig);

        vm.warp(block.timestamp + GRACE);
        escrow.expire(jobId);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Expired));
        escrow.assign(jobId, provider, 1000, expiry, sig);
    }

    function test_releaseProvider() public {
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotClient.selector));
        escrow.releaseProvider(jobId);

        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Released);
        vm.prank(client);
        escrow.releaseProvider(jobId);
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Open), "open again");
        (,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "released");

        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.releaseProvider(jobId);

        // the released epoch's votes are dead even though no epoch replaced it
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);

        _assign(jobId, PROVIDER_PK, 1000);
        assertEq(escrow.getJob(jobId).epoch, 2, "next epoch");
    }
}

contract CheckpointTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
    }

    function test_accept_creditsProvider() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50_000);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 50_000, "credited");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.lastAcceptedStep, 50, "step");
        assertEq(j.lastCheckpointHash, _ckpt(50), "hash");
        assertEq(j.remaining, 5e6 - 50_000, "remaining");

        // skipping an interval pays for every step since the last accepted one
        _accept(jobId, 150, _ckpt(150));
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 150_000, "credited for 100 more");
    }

    function test_accept_allVotesFromThreeVerifiers() public {
        uint256[] memory pks = new uint256[](3);
        pks[0] = V3_PK;
        pks[1] = V1_PK;
        pks[2] = V2_PK;
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), _votes(jobId, 1, 50, _ckpt(50), true, pks));
        assertEq(escrow.getJob(jobId).lastAcceptedStep, 50, "accepted");
    }

    function test_accept_completesJobAndRefunds() public {
        _accept(jobId, 350, _ckpt(350));
        bytes[] memory sigs = _quorumVotes(jobId, 1, 400, _ckpt(400), true);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 400, _ckpt(400), provider, 50_000);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Completed);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 5e6 - 400_000);
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), sigs);

        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Completed), "completed");
        assertEq(j.remaining, 0, "nothing left");
        (,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "epoch over");

        uint256 clientBefore = usdc.balanceOf(client);
        uint256 providerBefore = usdc.balanceOf(provider);
        vm.prank(client);
        escrow.withdraw(IERC20(address(usdc)));
        vm.prank(provider);
        escrow.withdraw(IERC20(address(usdc)));
        assertEq(usdc.balanceOf(client) - clientBefore, 5e6 - 400_000, "refund");
        assertEq(usdc.balanceOf(provider) - providerBefore, 400_000, "paid");
        assertEq(usdc.balanceOf(address(escrow)), 2 * MIN_STAKE, "only stakes left");

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Completed));
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), sigs);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Completed));
        escrow.expire(jobId);
    }

    function test_accept_finalStepOffInterval() public {
        uint256 odd = _createJob(1e6, 1000, 120, 50);
        _assign(odd, PROVIDER2_PK, 1000);
        _accept(odd, 100, _ckpt(100));
        uint64 epoch = _currentEpoch(odd);
        bytes[] memory sigs = _quorumVotes(odd, epoch, 110, _ckpt(110), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 110));
        escrow.acceptCheckpoint(odd, epoch, 110, _ckpt(110), sigs);
        _accept(odd, 120, _ckpt(120));
        assertEq(uint256(escrow.getJob(odd).status), uint256(JobEscrow.Status.Completed), "final step accepted");
    }

    function test_accept_revertsOnWrongEpoch() public {
        bytes[] memory sigs = _quorumVotes(jobId, 2, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 2, 1));
        escrow.acceptCheckpoint(jobId, 2, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnStaleEpochAfterReplacement() public {
        bytes[] memory stale = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        _assign(jobId, PROVIDER2_PK, 1000);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 1, 2));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), stale);
        // and the stale votes cannot be relabelled into the new epoch
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(jobId, 2, 50, _ckpt(50), stale);
    }

    function test_accept_revertsOnStepOffIntervalOrBeyondTotal() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 60, _ckpt(60), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 60));
        escrow.acceptCheckpoint(jobId, 1, 60, _ckpt(60), sigs);
        sigs = _quorumVotes(jobId, 1, 450, _ckpt(450), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 450));
        escrow.acceptCheckpoint(jobId, 1, 450, _ckpt(450), sigs);
    }

    function test_accept_revertsOnStepNotIncreasing() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 0, _ckpt(0), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepNotIncreasing.selector, 0, 0));
        escrow.acceptCheckpoint(jobId, 1, 0, _ckpt(0), sigs);

        _accept(jobId, 100, _ckpt(100));
        // replaying the accepted decision
        sigs = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepNotIncreasing.selector, 100, 100));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), sigs);
        sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepNotIncreasing.selector, 50, 100));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnDuplicateSigner() public {
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), true, _pks(V1_PK, V1_PK));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DuplicateSigner.selector, v1));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnNonListedVerifier() public {
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), true, _pks(V1_PK, OUTSIDER_PK));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotVerifier.selector, outsider));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnShortQuorum() public {
        uint256[] memory one = new uint256[](1);
        one[0] = V1_PK;
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), true, one);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 1, 2));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 0, 2));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), new bytes[](0));
    }

    function test_accept_revertsOnTooManySignatures() public {
        bytes[] memory sigs = new bytes[](33);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooManySignatures.selector));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnMalleableSignature() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        sigs[1] = malleate(sigs[1]);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BadSignature.selector, 1));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnRejectVotes() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), false);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnOtherCheckpointHash() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(51), sigs);
    }

    function test_accept_revertsOnVotesReplayedAcrossJobs() public {
        uint256 other = _defaultJob();
        _assign(other, PROVIDER2_PK, 1000);
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(other, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnVotesReplayedAcrossChainIds() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.chainId(1);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsOnVotesReplayedAcrossContracts() public {
        JobEscrow twin = new JobEscrow(IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY);
        // the same job, epoch and provider on a second escrow
        vm.startPrank(client);
        usdc.approve(address(twin), type(uint256).max);
        twin.createJob(
            IERC20(address(usdc)), 5e6, 10_000, 400, 50, keccak256("spec"), _verifiers(), 2, uint64(block.timestamp) + 1, 0
        );
        vm.stopPrank();
        vm.startPrank(provider2);
        usdc.approve(address(twin), type(uint256).max);
        twin.register(MIN_STAKE);
        vm.stopPrank();
        uint64 expiry = uint64(block.timestamp) + 1;
        bytes memory bid = signDigest(PROVIDER2_PK, twin.hashBid(1, 1, provider2, 1000, expiry));
        vm.prank(client);
        twin.assign(1, provider2, 1000, expiry, bid);

        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        twin.acceptCheckpoint(1, 1, 50, _ckpt(50), sigs);
        // and the original escrow still takes them
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsAfterDeadlinePlusGrace() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.warp(block.timestamp + DEADLINE_IN + GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooLate.selector));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
    }

    function test_accept_revertsWhenNotAssigned() public {
        uint256 open = _defaultJob();
        bytes[] memory sigs = _quorumVotes(open, 0, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(open, 0, 50, _ckpt(50), sigs);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 77));
        escrow.acceptCheckpoint(77, 0, 50, _ckpt(50), sigs);
    }

    function test_reject_slashesToClientAndReopens() public {
        _accept(jobId, 50, _ckpt(50));
        bytes32 junk = keccak256("junk");
        bytes[] memory sigs = _quorumVotes(jobId, 1, 100, junk, false);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(jobId, 1, 100, junk, provider, MIN_STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Slashed(provider, jobId, MIN_STAKE, client);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Rejected);
        escrow.rejectCheckpoint(jobId, 1, 100, junk, sigs);

        (uint256 stake,, uint32 live) = escrow.stakeOf(provider);
        assertEq(stake, 0, "slashed");
        assertEq(live, 0, "epoch ended");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), MIN_STAKE, "slash to client");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "reopened");
        assertEq(j.lastAcceptedStep, 50, "accepted work kept");
        assertEq(j.remaining, 5e6 - 50_000, "budget untouched");

        // the slashed provider cannot be assigned again; another can, from step 50
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory bid = _bidSig(PROVIDER_PK, jobId, 2, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, 0, MIN_STAKE));
        escrow.assign(jobId, provider, 1000, expiry, bid);
        _assign(jobId, PROVIDER2_PK, 1000);
        assertEq(escrow.getJob(jobId).epoch, 2, "epoch 2");

        // the reject decision cannot be replayed into the new epoch
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 1, 2));
        escrow.rejectCheckpoint(jobId, 1, 100, junk, sigs);
    }

    function test_reject_slashesAtMostWhatIsLeft() public {
        // 1.5 × minStake, two live epochs, both rejected: minStake then the half left
        _register(provider2, MIN_STAKE / 2);
        uint256 second = _defaultJob();
        _assign(second, PROVIDER2_PK, 1000);
        uint256 first = _defaultJob();
        _assign(first, PROVIDER2_PK, 1000);
        escrow.rejectCheckpoint(first, 1, 50, _ckpt(50), _quorumVotes(first, 1, 50, _ckpt(50), false));
        escrow.rejectCheckpoint(second, 1, 50, _ckpt(50), _quorumVotes(second, 1, 50, _ckpt(50), false));
        (uint256 stake,, uint32 live) = escrow.stakeOf(provider2);
        assertEq(stake, 0, "all slashed");
        assertEq(live, 0, "no epochs");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), MIN_STAKE + MIN_STAKE / 2, "client got both");
    }

    function test_reject_revertsLikeAccept() public {
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectPartialRevert(JobEscrow.NotVerifier.selector);
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        sigs = _quorumVotes(jobId, 1, 55, _ckpt(55), false);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 55));
        escrow.rejectCheckpoint(jobId, 1, 55, _ckpt(55), sigs);
        sigs = _votes(jobId, 1, 50, _ckpt(50), false, _pks(V2_PK, V2_PK));
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DuplicateSigner.selector, v2));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        sigs = _quorumVotes(jobId, 3, 50, _ckpt(50), false);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 3, 1));
        escrow.rejectCheckpoint(jobId, 3, 50, _ckpt(50), sigs);
    }
}

contract ExpireAndWithdrawTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
    }

    function test_expire_revertsBeforeDeadlinePlusGrace() public {
        uint256 at = block.timestamp + DEADLINE_IN + GRACE;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, at));
        escrow.expire(jobId);
        vm.warp(at - 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, at));
        escrow.expire(jobId);
    }

    function test_expire_refundsUnspentAndEndsEpoch() public {
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 100, _ckpt(100));
        vm.warp(block.timestamp + DEADLINE_IN + GRACE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Expired);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobExpired(jobId, 5e6 - 100_000);
        vm.prank(outsider);
        escrow.expire(jobId);
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 5e6 - 100_000, "refund");
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 100_000, "earned kept");
        (,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "epoch ended");
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Expired), "expired");

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Expired));
        escrow.expire(jobId);
        // the provider may leave now
        vm.prank(provider);
        escrow.requestUnbond();
    }

    function test_expire_unknownJob() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 5));
        escrow.expire(5);
    }

    function test_withdraw() public {
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToWithdraw.selector));
        escrow.withdraw(IERC20(address(usdc)));

        vm.warp(block.timestamp + DEADLINE_IN + GRACE);
        escrow.expire(jobId);
        uint256 before = usdc.balanceOf(client);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Withdrawn(client, address(usdc), 5e6);
        vm.prank(client);
        escrow.withdraw(IERC20(address(usdc)));
        assertEq(usdc.balanceOf(client), before + 5e6, "paid out");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "cleared");
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToWithdraw.selector));
        escrow.withdraw(IERC20(address(usdc)));
    }

    function test_withdraw_reentryIsRefused() public {
        ReentrantToken evil = new ReentrantToken(escrow);
        evil.mint(client, 10e6);
        vm.startPrank(client);
        evil.approve(address(escrow), type(uint256).max);
        uint256 evilJob = escrow.createJob(
            IERC20(address(evil)), 1e6, 1, 10, 5, bytes32(0), _verifiers(), 1, uint64(block.timestamp) + 10, 0
        );
        vm.stopPrank();
        vm.warp(block.timestamp + 10);
        escrow.expire(evilJob);
        evil.arm();
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(ReentrancyGuardTransient.ReentrancyGuardReentrantCall.selector));
        escrow.withdraw(IERC20(address(evil)));
    }
}

/// @dev Keeps 1 % of every transfer: the escrow must refuse it rather than book too much.
contract FeeToken is TestUSDC {
    function _update(address from, address to, uint256 value) internal override {
        if (from != address(0) && to != address(0)) {
            uint256 fee = value / 100;
            super._update(from, address(0xFEE), fee);
            value -= fee;
        }
        super._update(from, to, value);
    }
}

/// @dev Calls back into the escrow from a transfer once armed.
contract ReentrantToken is TestUSDC {
    JobEscrow internal immutable target;
    bool internal armed;

    constructor(JobEscrow target_) {
        target = target_;
    }

    function arm() external {
        armed = true;
    }

    function _update(address from, address to, uint256 value) internal override {
        super._update(from, to, value);
        if (armed) {
            armed = false;
            target.withdraw(IERC20(address(this)));
        }
    }
}
