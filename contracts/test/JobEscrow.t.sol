// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {Vm} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {TestUSDC} from "../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

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
        assertEq(escrow.maxDuration(), MAX_DURATION, "max duration");
        assertEq(escrow.maxGrace(), MAX_GRACE, "max grace");
        assertEq(escrow.decisionWindow(), DECISION_WINDOW, "decision window");
        assertEq(escrow.minVerifierStake(), MIN_VERIFIER_STAKE, "min verifier stake");
        assertEq(escrow.MAX_VERIFIERS(), 32, "committee bound");
        assertEq(escrow.burned(), 0, "nothing burned");
    }

    function test_constructor_revertsOnZeroToken() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAddress.selector));
        new JobEscrow(
            IERC20(address(0)), MIN_STAKE, UNBOND_DELAY, MAX_DURATION, MAX_GRACE, DECISION_WINDOW, MIN_VERIFIER_STAKE
        );
    }

    function test_constructor_revertsOnZeroMinStake() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        new JobEscrow(IERC20(address(usdc)), 0, UNBOND_DELAY, MAX_DURATION, MAX_GRACE, DECISION_WINDOW, MIN_VERIFIER_STAKE);
    }

    function test_constructor_revertsOnZeroMaxDuration() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        new JobEscrow(IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY, 0, MAX_GRACE, DECISION_WINDOW, MIN_VERIFIER_STAKE);
    }

    function test_constructor_revertsOnZeroMinVerifierStake() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        new JobEscrow(IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY, MAX_DURATION, MAX_GRACE, DECISION_WINDOW, 0);
    }

    /// A zero maxGrace is allowed: jobs then expire right at their deadline.
    function test_constructor_zeroMaxGraceAllowsOnlyZeroGrace() public {
        JobEscrow strict = new JobEscrow(
            IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY, MAX_DURATION, 0, DECISION_WINDOW, MIN_VERIFIER_STAKE
        );
        address[] memory vs = _verifiers();
        for (uint256 i; i < vs.length; ++i) {
            usdc.mint(vs[i], MIN_VERIFIER_STAKE);
            vm.startPrank(vs[i]);
            usdc.approve(address(strict), MIN_VERIFIER_STAKE);
            strict.registerVerifier(MIN_VERIFIER_STAKE);
            vm.stopPrank();
        }
        vm.startPrank(client);
        usdc.approve(address(strict), type(uint256).max);
        uint64 dl = uint64(block.timestamp) + 100;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.GraceTooLong.selector, 1, 0));
        strict.createJob(IERC20(address(usdc)), 1e6, 1, 10, 5, bytes32(0), 3, 2, FEE, dl, 1);
        strict.createJob(IERC20(address(usdc)), 1e6, 1, 10, 5, bytes32(0), 3, 2, FEE, dl, 0);
        vm.stopPrank();
    }
}

contract CreateJobTest is EscrowFixture {
    /// Creation pulls exactly the budget, stores every argument and leaves the job drawing:
    /// no committee and no terms yet, the seed block is the creation block.
    function test_createJob_pullsBudgetAndStoresJob() public {
        uint256 before = usdc.balanceOf(client);
        uint256 held = usdc.balanceOf(address(escrow));
        uint64 deadline = uint64(block.timestamp) + DEADLINE_IN;
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
            COMMITTEE,
            QUORUM,
            FEE,
            deadline,
            GRACE,
            uint64(block.number)
        );
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        assertEq(jobId, 1, "first id");
        assertEq(usdc.balanceOf(client), before - 5e6, "client paid");
        assertEq(usdc.balanceOf(address(escrow)) - held, 5e6, "escrow holds");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.client, client, "client");
        assertEq(j.token, address(usdc), "token");
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Drawing), "drawing");
        assertEq(uint256(j.status), 5, "Drawing is status 5");
        assertEq(j.epoch, 0, "no epoch");
        assertEq(j.provider, address(0), "no provider");
        assertEq(j.pricePerStep, 0, "no price");
        assertEq(j.maxPricePerStep, 10_000, "max price");
        assertEq(j.deposit, 5e6, "deposit");
        assertEq(j.remaining, 5e6, "remaining");
        assertEq(j.totalSteps, 400, "total");
        assertEq(j.checkpointInterval, 50, "interval");
        assertEq(j.lastAcceptedStep, 0, "step");
        assertEq(j.lastCheckpointHash, keccak256("spec"), "rooted at the spec");
        assertEq(j.specHash, keccak256("spec"), "spec");
        assertEq(j.committee.length, 0, "no committee yet");
        assertEq(j.committeeSize, COMMITTEE, "committee size");
        assertEq(j.quorum, QUORUM, "quorum");
        assertEq(j.verifierFee, FEE, "fee");
        assertEq(j.seedBlock, block.number, "seed block: the creation block");
        assertEq(j.deadline, deadline, "deadline");
        assertEq(j.grace, GRACE, "grace");
        assertTrue(!j.settled, "not settled");
        assertEq(j.terms, bytes32(0), "no terms before the draw");
        assertEq(escrow.termsOf(jobId), bytes32(0), "termsOf zero before the draw");
        assertTrue(!escrow.isVerifier(jobId, v2), "nobody sits on it yet");

        _draw(jobId);
        j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "open after the draw");
        assertEq(j.committee.length, 3, "committee");
        assertTrue(escrow.isVerifier(jobId, v2), "v2 drawn");
        assertTrue(!escrow.isVerifier(jobId, outsider), "outsider not drawn");
        assertEq(_createUndrawn(5e6, 10_000, 400, 50), 2, "ids increase");
    }

    /// The terms hash is keccak over the creation arguments and the drawn committee (as the
    /// keccak of its 32-byte-padded entries, in draw order): computed here without the
    /// escrow's encoder.
    function test_createJob_termsHashMatchesIndependentComputation() public {
        uint256 jobId = _defaultJob();
        TermsInput memory t = _defaultTerms(jobId);
        bytes32 expected = _expectedTerms(t);
        // and once more by hand, word by word, for the list hash
        bytes32 listHash = keccak256(
            bytes.concat(
                bytes32(uint256(uint160(t.committee[0]))),
                bytes32(uint256(uint160(t.committee[1]))),
                bytes32(uint256(uint160(t.committee[2])))
            )
        );
        assertEq(listHash, keccak256(abi.encode(t.committee[0], t.committee[1], t.committee[2])), "padded words");
        assertEq(escrow.termsOf(jobId), expected, "termsOf");
        assertEq(escrow.getJob(jobId).terms, expected, "getJob().terms");

        // the committee's order and the fee are part of the terms
        (t.committee[0], t.committee[1]) = (t.committee[1], t.committee[0]);
        assertTrue(_expectedTerms(t) != expected, "order is part of the terms");
        (t.committee[0], t.committee[1]) = (t.committee[1], t.committee[0]);
        t.fee = FEE + 1;
        assertTrue(_expectedTerms(t) != expected, "the fee is part of the terms");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 9));
        escrow.termsOf(9);
    }

    function _create(
        address token,
        uint256 budget,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint8 size,
        uint8 quorum,
        uint64 deadline
    ) internal {
        _createG(token, budget, maxPrice, total, interval, size, quorum, deadline, GRACE);
    }

    function _createG(
        address token,
        uint256 budget,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint8 size,
        uint8 quorum,
        uint64 deadline,
        uint64 grace
    ) internal {
        _createF(token, budget, maxPrice, total, interval, size, quorum, FEE, deadline, grace);
    }

    function _createF(
        address token,
        uint256 budget,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint8 size,
        uint8 quorum,
        uint256 fee,
        uint64 deadline,
        uint64 grace
    ) internal {
        vm.prank(client);
        escrow.createJob(IERC20(token), budget, maxPrice, total, interval, bytes32(0), size, quorum, fee, deadline, grace);
    }

    /// @dev `n` more verifiers in the pool.
    function _growPool(uint256 n) internal {
        for (uint256 i; i < n; ++i) {
            _stakeVerifier(vm.addr(0x1000 + i), MIN_VERIFIER_STAKE);
        }
    }

    function test_createJob_reverts_badArguments() public {
        uint64 dl = uint64(block.timestamp) + 100;
        address t = address(usdc);
        uint256 big = uint256(type(uint96).max) + 1;

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAddress.selector));
        _create(address(0), 1e6, 1, 10, 5, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _create(t, 0, 1, 10, 5, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _create(t, 1e6, 0, 10, 5, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _create(t, big, 1, 10, 5, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _create(t, 1e6, big, 10, 5, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _createF(t, 1e6, 1, 10, 5, 3, 2, big, dl, GRACE);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 0, 0, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 10, 0, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 10, 11, 3, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(t, 1e6, 1, 10, 5, 0, 1, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(t, 1e6, 1, 10, 5, 33, 17, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 3, 0, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 3, 4, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector));
        _create(t, 1e6, 1, 10, 5, 3, 2, uint64(block.timestamp));
        // 100 × 10 for the steps + 1000 × 3 × 2 for the fees
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BudgetTooSmall.selector, 6999, 7000));
        _create(t, 6999, 100, 10, 5, 3, 2, dl);
        _create(t, 7000, 100, 10, 5, 3, 2, dl);
        // the largest amounts fit
        usdc.mint(client, type(uint96).max);
        _createF(t, type(uint96).max, 1, 10, 5, 3, 2, 1, dl, GRACE);
        assertEq(escrow.getJob(2).remaining, type(uint96).max, "uint96 budgets are stored whole");
    }

    /// The budget covers every step at the maximum price and a fee for every member on
    /// every checkpoint, the final one counted even off the interval: ⌈total / interval⌉.
    function test_createJob_budgetCoversFees() public {
        uint64 dl = uint64(block.timestamp) + 100;
        address t = address(usdc);
        // 120 steps every 50: checkpoints at 50, 100 and 120, three of them
        uint256 needed = 120 * 7 + 3 * 3 * 11;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BudgetTooSmall.selector, needed - 1, needed));
        _createF(t, needed - 1, 7, 120, 50, 3, 2, 11, dl, GRACE);
        _createF(t, needed, 7, 120, 50, 3, 2, 11, dl, GRACE);
        // a zero fee is allowed: the budget covers the steps alone
        _createF(t, 120 * 7, 7, 120, 50, 3, 2, 0, dl, GRACE);
        assertEq(escrow.jobCount(), 2, "exact budgets are fine");
    }

    /// One member is a quorum of one: a single key would decide alone. 32 is the bound.
    function test_createJob_reverts_fewerThanTwoVerifiers() public {
        uint64 dl = uint64(block.timestamp) + 100;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(address(usdc), 1e6, 1, 10, 5, 1, 1, dl);
        _create(address(usdc), 1e6, 1, 10, 5, 2, 2, dl);
        _growPool(29);
        _create(address(usdc), 1e6, 1, 10, 5, 32, 17, dl);
        assertEq(escrow.jobCount(), 2, "2 and 32 members are fine");
    }

    /// The quorum must be a strict majority, so an accepting and a rejecting quorum always
    /// share a member.
    function test_createJob_reverts_nonMajorityQuorum() public {
        uint64 dl = uint64(block.timestamp) + 100;
        address t = address(usdc);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 3, 1, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 2, 1, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 4, 2, dl);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 32, 16, dl);
        // quorum × 2 is computed wide: a large uint8 quorum is refused, not an overflow
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 32, 200, dl);
        _growPool(1);
        _create(t, 1e6, 1, 10, 5, 4, 3, dl);
        _create(t, 1e6, 1, 10, 5, 3, 3, dl);
        assertEq(escrow.jobCount(), 2, "majorities are fine");
    }

    function test_createJob_reverts_deadlineTooFar() public {
        uint64 latest = uint64(block.timestamp) + MAX_DURATION;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineTooFar.selector, latest + 1, uint256(latest)));
        _create(address(usdc), 1e6, 1, 10, 5, 3, 2, latest + 1);
        vm.expectRevert(
            abi.encodeWithSelector(JobEscrow.DeadlineTooFar.selector, type(uint64).max, uint256(latest))
        );
        _create(address(usdc), 1e6, 1, 10, 5, 3, 2, type(uint64).max);
        _create(address(usdc), 1e6, 1, 10, 5, 3, 2, latest);
        assertEq(escrow.getJob(1).deadline, latest, "exactly maxDuration ahead is fine");
    }

    function test_createJob_reverts_graceTooLong() public {
        uint64 dl = uint64(block.timestamp) + 100;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.GraceTooLong.selector, MAX_GRACE + 1, MAX_GRACE));
        _createG(address(usdc), 1e6, 1, 10, 5, 3, 2, dl, MAX_GRACE + 1);
        _createG(address(usdc), 1e6, 1, 10, 5, 3, 2, dl, MAX_GRACE);
        _createG(address(usdc), 1e6, 1, 10, 5, 3, 2, dl, 0);
        assertEq(escrow.getJob(1).grace, MAX_GRACE, "exactly maxGrace is fine");
    }

    /// The pool must hold committeeSize accounts other than the client: a pooled client
    /// does not count, since it is never drawn.
    function test_createJob_reverts_notEnoughVerifiers() public {
        uint64 dl = uint64(block.timestamp) + 100;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 3, 4));
        _create(address(usdc), 1e6, 1, 10, 5, 4, 3, dl);
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        assertEq(escrow.poolSize(), 4, "the client is pooled");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 3, 4));
        _create(address(usdc), 1e6, 1, 10, 5, 4, 3, dl);
        _create(address(usdc), 1e6, 1, 10, 5, 3, 2, dl);
        // another client may use the pooled client's seat
        _fund(outsider, 1e6);
        vm.prank(outsider);
        escrow.createJob(IERC20(address(usdc)), 1e6, 1, 10, 5, bytes32(0), 4, 3, FEE, dl, GRACE);
        assertEq(escrow.jobCount(), 2, "created");
    }

    /// The spec's order: zero address, zero amounts, too large, steps, committee size,
    /// quorum, deadline passed, too far, grace, budget, pool.
    function test_createJob_checkOrder() public {
        address t = address(usdc);
        uint64 now_ = uint64(block.timestamp);
        uint64 far = now_ + MAX_DURATION + 1;
        uint256 big = uint256(type(uint96).max) + 1;
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAddress.selector));
        _createF(address(0), 0, 0, 0, 0, 1, 0, big, now_, MAX_GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _createF(t, 0, big, 0, 0, 1, 0, big, now_, MAX_GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _createF(t, 1e6, 1, 0, 0, 1, 0, big, now_, MAX_GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidSteps.selector));
        _create(t, 1e6, 1, 0, 0, 1, 0, now_);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidVerifiers.selector));
        _create(t, 1e6, 1, 10, 5, 1, 0, now_);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InvalidQuorum.selector));
        _create(t, 1e6, 1, 10, 5, 9, 1, now_);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlinePassed.selector));
        _createG(t, 1e6, 1, 10, 5, 9, 5, now_, MAX_GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineTooFar.selector, far, uint256(far - 1)));
        _createG(t, 1e6, 1, 10, 5, 9, 5, far, MAX_GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.GraceTooLong.selector, MAX_GRACE + 1, MAX_GRACE));
        _createG(t, 1, 1, 10, 5, 9, 5, now_ + 100, MAX_GRACE + 1);
        // a pool of 3 for a committee of 9, and a budget too small: the budget first
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BudgetTooSmall.selector, 1, 10 + FEE * 9 * 2));
        _create(t, 1, 1, 10, 5, 9, 5, now_ + 100);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 3, 9));
        _create(t, 1e6, 1, 10, 5, 9, 5, now_ + 100);
    }

    function test_createJob_reverts_feeOnTransferToken() public {
        FeeToken fee = new FeeToken();
        fee.mint(client, 10e6);
        vm.prank(client);
        fee.approve(address(escrow), type(uint256).max);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DepositMismatch.selector, 1e6 - 1e4, 1e6));
        _create(address(fee), 1e6, 1, 10, 5, 3, 2, uint64(block.timestamp) + 100);
    }

    function test_getJob_revertsOnUnknownJob() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 42));
        escrow.getJob(42);
    }
}

contract StakeTest is EscrowFixture {
    function _stake(address who) internal view returns (uint256 bonded, uint256 unbonding, uint64 at, uint32 live) {
        return escrow.stakeOf(who);
    }

    function test_register_addsStake() public {
        vm.expectEmit(address(escrow));
        emit JobEscrow.Staked(provider, MIN_STAKE, MIN_STAKE);
        _register(provider, MIN_STAKE);
        _register(provider, 5);
        (uint256 bonded, uint256 unbonding, uint64 unbondAt, uint32 live) = _stake(provider);
        assertEq(bonded, MIN_STAKE + 5, "stake");
        assertEq(unbonding, 0, "nothing unbonding");
        assertEq(unbondAt, 0, "no delay");
        assertEq(live, 0, "no epochs");
        assertEq(usdc.balanceOf(address(escrow)), MIN_STAKE + 5 + 3 * MIN_VERIFIER_STAKE, "held, beside the verifier stakes");
    }

    function test_register_revertsOnZeroOrTooLarge() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        _register(provider, 0);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        _register(provider, uint256(type(uint128).max) + 1);
    }

    /// Registering while something unbonds adds to the bonded part and leaves the unbonding
    /// part and its delay alone.
    function test_register_whileUnbonding() public {
        _register(provider, MIN_STAKE);
        vm.prank(provider);
        escrow.requestUnbond(40e6);
        (,, uint64 at,) = _stake(provider);
        vm.warp(block.timestamp + 1 days);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Staked(provider, 5, MIN_STAKE - 40e6 + 5);
        _register(provider, 5);
        (uint256 bonded, uint256 unbonding, uint64 at2,) = _stake(provider);
        assertEq(bonded, MIN_STAKE - 40e6 + 5, "bonded grew");
        assertEq(unbonding, 40e6, "unbonding untouched");
        assertEq(at2, at, "delay untouched");
    }

    function test_unbond_fullCycle() public {
        _register(provider, MIN_STAKE);
        uint256 before = usdc.balanceOf(provider);
        vm.prank(provider);
        vm.expectEmit(address(escrow));
        emit JobEscrow.UnbondRequested(provider, MIN_STAKE, uint64(block.timestamp) + UNBOND_DELAY);
        escrow.requestUnbond(MIN_STAKE);
        (uint256 bonded, uint256 unbonding, uint64 unbondAt,) = _stake(provider);
        assertEq(bonded, 0, "moved out of bonded");
        assertEq(unbonding, MIN_STAKE, "into unbonding");
        assertEq(unbondAt, block.timestamp + UNBOND_DELAY, "delay");

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
        (bonded, unbonding, unbondAt,) = _stake(provider);
        assertEq(bonded + unbonding + unbondAt, 0, "cleared");

        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotUnbonding.selector));
        escrow.withdrawStake();
    }

    function test_requestUnbond_revertsOnZeroOrNoStake() public {
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.requestUnbond(0);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 0, 1));
        escrow.requestUnbond(1);
        _register(provider, MIN_STAKE);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, MIN_STAKE, MIN_STAKE + 1));
        escrow.requestUnbond(MIN_STAKE + 1);
    }

    /// Only stake above liveEpochs × minStake can be unbonded, in parts; each request
    /// restarts the delay for everything unbonding.
    function test_requestUnbond_partialOfFreeStakeOnly() public {
        _register(provider, 250e6);
        uint256 jobId = _defaultJob();
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 150e6, 150e6 + 1));
        escrow.requestUnbond(150e6 + 1);

        vm.prank(provider);
        escrow.requestUnbond(50e6);
        (uint256 bonded, uint256 unbonding, uint64 at,) = _stake(provider);
        assertEq(bonded, 200e6, "bonded after the first part");
        assertEq(unbonding, 50e6, "unbonding after the first part");
        assertEq(at, block.timestamp + UNBOND_DELAY, "first delay");

        vm.warp(block.timestamp + 1 days);
        vm.prank(provider);
        vm.expectEmit(address(escrow));
        emit JobEscrow.UnbondRequested(provider, 100e6, uint64(block.timestamp) + UNBOND_DELAY);
        escrow.requestUnbond(100e6);
        (bonded, unbonding, at,) = _stake(provider);
        assertEq(bonded, MIN_STAKE, "exactly the reservation stays");
        assertEq(unbonding, 150e6, "both parts unbond");
        assertEq(at, block.timestamp + UNBOND_DELAY, "delay restarted");

        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 0, 1));
        escrow.requestUnbond(1);
    }

    /// Withdrawing after the delay pays the unbonding part only; the bonded part keeps backing
    /// the live epoch and can still be slashed for it.
    function test_withdrawStake_paysOnlyUnbondingPart() public {
        _register(provider, 300e6);
        // a job that outlives the unbonding delay
        vm.prank(client);
        uint256 jobId = escrow.createJob(
            IERC20(address(usdc)),
            5e6,
            10_000,
            400,
            50,
            keccak256("spec"),
            COMMITTEE,
            QUORUM,
            FEE,
            uint64(block.timestamp) + UNBOND_DELAY + 1 days,
            GRACE
        );
        _draw(jobId);
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(provider);
        escrow.requestUnbond(200e6);
        vm.warp(block.timestamp + UNBOND_DELAY);
        uint256 before = usdc.balanceOf(provider);
        vm.prank(provider);
        escrow.withdrawStake();
        assertEq(usdc.balanceOf(provider) - before, 200e6, "paid the unbonding part");
        (uint256 bonded, uint256 unbonding, uint64 at, uint32 live) = _stake(provider);
        assertEq(bonded, MIN_STAKE, "bonded stays");
        assertEq(unbonding + at, 0, "unbonding cleared");
        assertEq(live, 1, "still live");

        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), _allVotes(jobId, 1, 50, _ckpt(50), false));
        (bonded,,,) = _stake(provider);
        assertEq(bonded, 0, "the reservation was there to slash");
        assertEq(escrow.burned(), MIN_STAKE, "burned");
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

    function _live(address who) internal view returns (uint32 live) {
        (,,, live) = escrow.stakeOf(who);
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
        assertEq(_live(provider), 1, "live epoch");
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
        assertEq(_live(provider), 0, "old provider released");
        assertEq(_live(provider2), 1, "new provider live");
    }

    /// The live epoch ends before the stake check, so a provider with stake for one epoch can
    /// be re-assigned to the job it holds (a new bid, a new epoch).
    function test_assign_sameProviderAgainNeedsNoSecondReservation() public {
        _assign(jobId, PROVIDER_PK, 1000);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, jobId, 2, 800, expiry);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Replaced);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ProviderAssigned(jobId, 2, provider, 800, 0, keccak256("spec"));
        vm.prank(client);
        escrow.assign(jobId, provider, 800, expiry, sig);
        assertEq(_live(provider), 1, "one epoch, one reservation");
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

    /// No stake, or stake that is unbonding (which can be neither reserved nor slashed).
    function test_assign_revertsOnInsufficientOrUnbondingStake() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(OUTSIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, 0, MIN_STAKE));
        escrow.assign(jobId, outsider, 1000, expiry, sig);

        vm.prank(provider);
        escrow.requestUnbond(1);
        sig = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, MIN_STAKE - 1, MIN_STAKE));
        escrow.assign(jobId, provider, 1000, expiry, sig);
        // topping the bonded part up while the rest unbonds is enough
        _register(provider, 1);
        vm.prank(client);
        escrow.assign(jobId, provider, 1000, expiry, sig);
        assertEq(_live(provider), 1, "assigned while something unbonds");
    }

    /// Stake is reserved per live epoch: minStake bonded holds one epoch, not two; once the
    /// first ends the second can be assigned; 2 × minStake holds two.
    function test_assign_reservesStakePerLiveEpoch() public {
        uint256 second = _defaultJob();
        _assign(jobId, PROVIDER_PK, 1000);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, second, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, MIN_STAKE, 2 * MIN_STAKE));
        escrow.assign(second, provider, 1000, expiry, sig);

        vm.prank(client);
        escrow.releaseProvider(jobId);
        vm.prank(client);
        escrow.assign(second, provider, 1000, expiry, sig);
        assertEq(_live(provider), 1, "the other job now");

        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER2_PK, 1000);
        uint256 third = _defaultJob();
        _assign(third, PROVIDER2_PK, 1000);
        assertEq(_live(provider2), 2, "2 x minStake holds two epochs");
    }

    /// A provider that is one of the job's verifiers could vote on its own work.
    function test_assign_revertsWhenProviderIsVerifier() public {
        _fund(v1, MIN_STAKE);
        _register(v1, MIN_STAKE);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(V1_PK, jobId, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ProviderIsVerifier.selector, v1));
        escrow.assign(jobId, v1, 1000, expiry, sig);
        // on a job it does not sit on (it left the pool before the draw), it may provide,
        // while it still sits on the first job's committee
        vm.prank(v1);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        _stakeVerifier(outsider, MIN_VERIFIER_STAKE);
        uint256 other = _defaultJob();
        assertTrue(!escrow.isVerifier(other, v1), "v1 not drawn");
        assertTrue(escrow.isVerifier(jobId, v1), "membership outlives the pool");
        _assign(other, V1_PK, 1000);
        assertEq(escrow.getJob(other).provider, v1, "provider elsewhere");
    }

    /// A job whose committee is not drawn yet cannot be assigned: there are no terms to bid on.
    function test_assign_revertsWhileDrawing() public {
        uint256 drawing = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, drawing, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.assign(drawing, provider, 1000, expiry, sig);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.releaseProvider(drawing);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.resign(drawing);
    }

    /// The spec's order after the price checks: verifier, (end the live epoch), stake, signature.
    function test_assign_checkOrder() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        // a zero price before the verifier check
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.assign(jobId, v1, 0, expiry, "");
        // a verifier with no stake and no signature: the verifier check first
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ProviderIsVerifier.selector, v2));
        escrow.assign(jobId, v2, 1000, expiry, "");
        // no stake and no signature: the stake check first
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, 0, MIN_STAKE));
        escrow.assign(jobId, outsider, 1000, expiry, "");
        // stake but a malformed signature
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BadSignature.selector, 0));
        escrow.assign(jobId, provider, 1000, expiry, "");
    }

    function test_assign_revertsOnBidSignedByAnother() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes32 digest = escrow.hashBid(jobId, escrow.termsOf(jobId), 1, provider, 1000, expiry);
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

    /// A bid over other terms (the same job id, epoch, provider, price and expiry) is refused.
    function test_assign_revertsOnBidSignedOverOtherTerms() public {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes32 other = keccak256("terms the provider read elsewhere");
        bytes memory sig = _bidSigOver(PROVIDER_PK, jobId, other, 1, 1000, expiry);
        address recovered = ECDSA.recover(escrow.hashBid(jobId, escrow.termsOf(jobId), 1, provider, 1000, expiry), sig);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongSigner.selector, recovered, provider));
        escrow.assign(jobId, provider, 1000, expiry, sig);
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
        // the same creation arguments at the same time, and a seed block hash (as a proposer
        // could grind one) that draws the same committee in the same order: the same terms,
        // only the id differs
        uint256 other = _createUndrawn(5e6, 10_000, 400, 50);
        address[] memory want = escrow.getJob(jobId).committee;
        address[] memory pool = _pool();
        bytes32 h;
        for (uint256 k;; ++k) {
            h = keccak256(abi.encode("grind", k));
            if (keccak256(abi.encode(_expectedCommittee(h, other, pool, client, 3))) == keccak256(abi.encode(want))) {
                break;
            }
        }
        vm.roll(block.number + 1);
        vm.setBlockhash(escrow.getJob(other).seedBlock, h);
        escrow.drawCommittee(other);
        assertEq(escrow.termsOf(other), escrow.termsOf(jobId), "same terms");
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
        assertEq(_live(provider), 0, "released");

        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.releaseProvider(jobId);

        // the released epoch's rejects are dead at once, its accepts once the window is over
        bytes[] memory rejects = _quorumVotes(jobId, 1, 50, _ckpt(50), false);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), rejects);
        uint64 windowEnd = uint64(block.timestamp) + DECISION_WINDOW;
        vm.warp(uint256(windowEnd) + 1);
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WindowClosed.selector, windowEnd));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);

        _assign(jobId, PROVIDER_PK, 1000);
        assertEq(escrow.getJob(jobId).epoch, 2, "next epoch");
    }
}

contract ResignTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
    }

    function _resign() internal {
        vm.prank(provider);
        escrow.resign(jobId);
    }

    /// Resigning ends the epoch with reason Resigned and slashes nothing; accepted work stays
    /// paid and the job is open again from the last accepted checkpoint.
    function test_resign_endsEpochWithoutSlash() public {
        _accept(jobId, 50, _ckpt(50));
        uint256 held = usdc.balanceOf(address(escrow));
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Resigned);
        _resign();
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "open again");
        assertEq(j.epoch, 1, "no new epoch yet");
        assertEq(j.lastAcceptedStep, 50, "accepted work kept");
        assertEq(j.remaining, 5e6 - 50_000 - 2 * FEE, "budget less the accepted step and its fees");
        (uint256 bonded, uint256 unbonding,, uint32 live) = escrow.stakeOf(provider);
        assertEq(bonded, MIN_STAKE, "no slash");
        assertEq(unbonding, 0, "nothing moved");
        assertEq(live, 0, "epoch ended");
        assertEq(escrow.burned(), 0, "nothing burned");
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 50_000, "accepted steps paid");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "the client gets nothing");
        assertEq(usdc.balanceOf(address(escrow)), held, "no tokens moved");
    }

    function test_resign_reverts() public {
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotProvider.selector));
        escrow.resign(jobId);
        vm.prank(provider2);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotProvider.selector));
        escrow.resign(jobId);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 9));
        escrow.resign(9);

        _resign();
        // Open: the status check comes before the caller check
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.resign(jobId);
        vm.prank(outsider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.resign(jobId);

        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 400, _ckpt(400));
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Completed));
        escrow.resign(jobId);
    }

    /// Steps done in the resigned epoch but not accepted are never paid: its votes are dead.
    function test_resign_unacceptedStepsUnpaid() public {
        _accept(jobId, 50, _ckpt(50));
        bytes[] memory late = _quorumVotes(jobId, 1, 100, _ckpt(100), true);
        _resign();
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), late);
        _assign(jobId, PROVIDER2_PK, 1000);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 1, 2));
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), late);
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 50_000, "only the accepted 50 steps");
    }

    /// Resigning releases the reservation: the stake can back another job, or be unbonded.
    function test_resign_releasesReservation() public {
        uint256 second = _defaultJob();
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(PROVIDER_PK, second, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, MIN_STAKE, 2 * MIN_STAKE));
        escrow.assign(second, provider, 1000, expiry, sig);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 0, MIN_STAKE));
        escrow.requestUnbond(MIN_STAKE);

        _resign();
        vm.prank(client);
        escrow.assign(second, provider, 1000, expiry, sig);
        vm.prank(provider);
        escrow.resign(second);
        vm.prank(provider);
        escrow.requestUnbond(MIN_STAKE);
        (uint256 bonded, uint256 unbonding,,) = escrow.stakeOf(provider);
        assertEq(bonded, 0, "all free");
        assertEq(unbonding, MIN_STAKE, "all unbonding");
    }

    /// A resigned provider may be assigned again, with a new bid for the new epoch (its old
    /// bid named epoch 1).
    function test_resign_providerCanBeAssignedAgain() public {
        _accept(jobId, 50, _ckpt(50));
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory old = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        _resign();
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 1000, expiry, old);

        bytes memory fresh = _bidSig(PROVIDER_PK, jobId, 2, 900, expiry);
        vm.expectEmit(address(escrow));
        emit JobEscrow.ProviderAssigned(jobId, 2, provider, 900, 50, _ckpt(50));
        vm.prank(client);
        escrow.assign(jobId, provider, 900, expiry, fresh);
        _accept(jobId, 100, _ckpt(100));
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 50_000 + 45_000, "paid at the new price");
    }
}

contract SettleTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
    }

    function test_settle_revertsBeforeCompletion() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Assigned));
        escrow.settle(jobId);
        vm.prank(client);
        escrow.releaseProvider(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.settle(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 9));
        escrow.settle(9);
        uint256 drawing = _createUndrawn(5e6, 10_000, 400, 50);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.settle(drawing);
        vm.warp(block.timestamp + DEADLINE_IN + GRACE);
        escrow.expire(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Expired));
        escrow.settle(jobId);
    }

    /// Completion leaves the refund and the fees in the escrow; anyone may settle once: each
    /// member is credited exactly what it earned (FeesCredited, in committee order), then the
    /// client exactly the rest (JobSettled); the second settle is refused.
    function test_settle_anyoneCreditsFeesAndExactRefundOnce() public {
        _accept(jobId, 50, _ckpt(50)); // v1 and v2
        uint64 epoch = _currentEpoch(jobId);
        escrow.acceptCheckpoint(jobId, epoch, 400, _ckpt(400), _votes(jobId, epoch, 400, _ckpt(400), true, _pks(V3_PK, V2_PK)));
        uint256 refund = 5e6 - 400_000 - 4 * FEE;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.remaining, refund, "refund waits in remaining");
        assertEq(_paid(jobId, v1), 1, "v1 signed one decision");
        assertEq(_paid(jobId, v2), 2, "v2 signed two");
        assertEq(_paid(jobId, v3), 1, "v3 signed one");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "not credited yet");
        assertEq(escrow.withdrawable(v2, IERC20(address(usdc))), 0, "fees not credited yet");

        // the fee events in committee order, then the refund
        for (uint256 i; i < 3; ++i) {
            address m = j.committee[i];
            vm.expectEmit(address(escrow));
            emit JobEscrow.FeesCredited(jobId, m, _paid(jobId, m) * FEE);
        }
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobSettled(jobId, client, refund);
        vm.prank(outsider);
        escrow.settle(jobId);
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), refund, "refund credited");
        assertEq(escrow.withdrawable(v1, IERC20(address(usdc))), FEE, "v1: one fee");
        assertEq(escrow.withdrawable(v2, IERC20(address(usdc))), 2 * FEE, "v2: two fees");
        assertEq(escrow.withdrawable(v3, IERC20(address(usdc))), FEE, "v3: one fee");
        assertEq(escrow.withdrawable(outsider, IERC20(address(usdc))), 0, "the caller gets nothing");
        j = escrow.getJob(jobId);
        assertEq(j.remaining, 0, "nothing left");
        assertTrue(j.settled, "settled");
        assertEq(_paid(jobId, v2), 2, "the record stays");

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToSettle.selector));
        escrow.settle(jobId);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToSettle.selector));
        escrow.settle(jobId);

        uint256 before = usdc.balanceOf(client);
        vm.prank(client);
        escrow.withdraw(IERC20(address(usdc)));
        assertEq(usdc.balanceOf(client) - before, refund, "refund paid out");
        before = usdc.balanceOf(v2);
        vm.prank(v2);
        escrow.withdraw(IERC20(address(usdc)));
        assertEq(usdc.balanceOf(v2) - before, 2 * FEE, "fees paid out");
    }

    /// A job that spent its whole budget completes with a zero refund: settle still runs once
    /// (JobSettled with 0) and then has nothing to settle.
    function test_settle_zeroRefundOnce() public {
        vm.prank(client);
        uint256 tight = escrow.createJob(
            IERC20(address(usdc)), 400 * 10_000, 10_000, 400, 50, keccak256("spec"), 3, 2, 0, uint64(block.timestamp) + 1 days, GRACE
        );
        _draw(tight);
        _register(provider2, MIN_STAKE);
        _assign(tight, PROVIDER2_PK, 10_000);
        uint64 epoch = _currentEpoch(tight);
        bytes[] memory sigs = _quorumVotes(tight, epoch, 400, _ckpt(400), true);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(tight, 0);
        escrow.acceptCheckpoint(tight, epoch, 400, _ckpt(400), sigs);
        // a zero fee still counts the decision (the record); its credit is zero
        address[] memory committee = escrow.getJob(tight).committee;
        for (uint256 i; i < 3; ++i) {
            if (committee[i] == v3) continue;
            assertEq(_paid(tight, committee[i]), 1, "counted");
            vm.expectEmit(address(escrow));
            emit JobEscrow.FeesCredited(tight, committee[i], 0);
        }
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobSettled(tight, client, 0);
        escrow.settle(tight);
        assertTrue(escrow.getJob(tight).settled, "settled");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToSettle.selector));
        escrow.settle(tight);
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
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50_000, _bits(jobId, v1, v2), 2 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 50_000, "credited");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.lastAcceptedStep, 50, "step");
        assertEq(j.lastCheckpointHash, _ckpt(50), "hash");
        assertEq(j.remaining, 5e6 - 50_000 - 2 * FEE, "remaining: the payout and two fees");
        assertEq(_paid(jobId, v1), 1, "v1 earned a fee");
        assertEq(_paid(jobId, v2), 1, "v2 earned a fee");
        assertEq(_paid(jobId, v3), 0, "v3 did not sign");
        assertEq(escrow.withdrawable(v1, IERC20(address(usdc))), 0, "fees wait for settle");

        // skipping an interval pays for every step since the last accepted one
        _accept(jobId, 150, _ckpt(150));
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 150_000, "credited for 100 more");
    }

    function test_accept_allVotesFromThreeVerifiers() public {
        uint256[] memory pks = new uint256[](3);
        pks[0] = V3_PK;
        pks[1] = V1_PK;
        pks[2] = V2_PK;
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50_000, 7, 3 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), _votes(jobId, 1, 50, _ckpt(50), true, pks));
        assertEq(escrow.getJob(jobId).lastAcceptedStep, 50, "accepted");
        assertEq(escrow.getJob(jobId).remaining, 5e6 - 50_000 - 3 * FEE, "three fees");
    }

    /// Completion pays the last steps and ends the epoch; the refund waits for `settle`.
    function test_accept_completesJobAndLeavesRefundToSettle() public {
        _accept(jobId, 350, _ckpt(350));
        bytes[] memory sigs = _quorumVotes(jobId, 1, 400, _ckpt(400), true);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 400, _ckpt(400), provider, 50_000, _bits(jobId, v1, v2), 2 * FEE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Completed);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobCompleted(jobId, 5e6 - 400_000 - 4 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), sigs);

        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Completed), "completed");
        assertEq(j.remaining, 5e6 - 400_000 - 4 * FEE, "the refund stays until settled");
        assertTrue(!j.settled, "not settled");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "not credited by the accept");
        (,,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "epoch over");

        escrow.settle(jobId);
        uint256 clientBefore = usdc.balanceOf(client);
        uint256 providerBefore = usdc.balanceOf(provider);
        vm.prank(client);
        escrow.withdraw(IERC20(address(usdc)));
        vm.prank(provider);
        escrow.withdraw(IERC20(address(usdc)));
        vm.prank(v1);
        escrow.withdraw(IERC20(address(usdc)));
        vm.prank(v2);
        escrow.withdraw(IERC20(address(usdc)));
        assertEq(usdc.balanceOf(client) - clientBefore, 5e6 - 400_000 - 4 * FEE, "refund");
        assertEq(usdc.balanceOf(provider) - providerBefore, 400_000, "paid");
        assertEq(usdc.balanceOf(v1), 2 * FEE, "v1: two fees");
        assertEq(usdc.balanceOf(v2), 2 * FEE, "v2: two fees");
        assertEq(usdc.balanceOf(address(escrow)), 2 * MIN_STAKE + 3 * MIN_VERIFIER_STAKE, "only stakes left");

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
        uint64 windowEnd = uint64(block.timestamp) + DECISION_WINDOW;
        vm.warp(uint256(windowEnd) + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WindowClosed.selector, windowEnd));
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), stale);
        // a reject of the replaced epoch never lands
        bytes[] memory staleReject = _quorumVotes(jobId, 1, 50, _ckpt(50), false);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 1, 2));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), staleReject);
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
        JobEscrow twin = _deploy();
        // the same job, epoch and provider on a second escrow
        vm.startPrank(client);
        usdc.approve(address(twin), type(uint256).max);
        vm.stopPrank();
        address[] memory vs = _verifiers();
        for (uint256 i; i < 3; ++i) {
            usdc.mint(vs[i], MIN_VERIFIER_STAKE);
            vm.startPrank(vs[i]);
            usdc.approve(address(twin), MIN_VERIFIER_STAKE);
            twin.registerVerifier(MIN_VERIFIER_STAKE);
            vm.stopPrank();
        }
        vm.prank(client);
        twin.createJob(
            IERC20(address(usdc)), 5e6, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, uint64(block.timestamp) + 1, 0
        );
        vm.roll(block.number + 1);
        twin.drawCommittee(1);
        vm.startPrank(provider2);
        usdc.approve(address(twin), type(uint256).max);
        twin.register(MIN_STAKE);
        vm.stopPrank();
        uint64 expiry = uint64(block.timestamp) + 1;
        bytes memory bid = signDigest(PROVIDER2_PK, twin.hashBid(1, twin.termsOf(1), 1, provider2, 1000, expiry));
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
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 77));
        escrow.rejectCheckpoint(77, 0, 50, _ckpt(50), sigs);
        uint256 drawing = _createUndrawn(5e6, 10_000, 400, 50);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.acceptCheckpoint(drawing, 0, 50, _ckpt(50), sigs);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Drawing));
        escrow.rejectCheckpoint(drawing, 0, 50, _ckpt(50), sigs);
    }

    /// A live decision's checks in the spec's order: status, epoch, time, step, interval,
    /// then the signatures (count, quorum, then each entry: valid, member, distinct).
    function test_decision_checkOrder() public {
        bytes[] memory many = new bytes[](33);
        uint256 snap = vm.snapshotState();
        vm.warp(block.timestamp + DEADLINE_IN + GRACE + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 2, 1));
        escrow.rejectCheckpoint(jobId, 2, 0, _ckpt(0), many);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooLate.selector));
        escrow.acceptCheckpoint(jobId, 1, 0, _ckpt(0), many);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooLate.selector));
        escrow.rejectCheckpoint(jobId, 1, 0, _ckpt(0), many);
        vm.revertToState(snap);
        for (uint256 r; r < 2; ++r) {
            bool accept = r == 0;
            _decide(accept, 0, many, abi.encodeWithSelector(JobEscrow.StepNotIncreasing.selector, 0, 0));
            _decide(accept, 60, many, abi.encodeWithSelector(JobEscrow.StepOffInterval.selector, 60));
            _decide(accept, 50, many, abi.encodeWithSelector(JobEscrow.TooManySignatures.selector));
            bytes[] memory one = _votes(jobId, 1, 50, _ckpt(50), accept, _pks(V1_PK, V2_PK));
            bytes[] memory short = new bytes[](1);
            short[0] = one[0];
            _decide(accept, 50, short, abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 1, 2));
            bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), accept, _pks(OUTSIDER_PK, V1_PK, V1_PK));
            sigs[1] = hex"00";
            _decide(accept, 50, sigs, abi.encodeWithSelector(JobEscrow.NotVerifier.selector, outsider));
            sigs = _votes(jobId, 1, 50, _ckpt(50), accept, _pks(V1_PK, OUTSIDER_PK, V1_PK));
            sigs[1] = hex"00";
            _decide(accept, 50, sigs, abi.encodeWithSelector(JobEscrow.BadSignature.selector, 1));
            sigs = _votes(jobId, 1, 50, _ckpt(50), accept, _pks(V1_PK, V1_PK, OUTSIDER_PK));
            _decide(accept, 50, sigs, abi.encodeWithSelector(JobEscrow.DuplicateSigner.selector, v1));
        }
        vm.prank(client);
        escrow.releaseProvider(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.rejectCheckpoint(jobId, 2, 0, _ckpt(0), many);
    }

    function _decide(bool accept, uint64 step, bytes[] memory sigs, bytes memory err) internal {
        vm.expectRevert(err);
        if (accept) escrow.acceptCheckpoint(jobId, 1, step, _ckpt(step), sigs);
        else escrow.rejectCheckpoint(jobId, 1, step, _ckpt(step), sigs);
    }

    /// A unanimous reject burns minStake: it is counted in `burned`, stays in the escrow, and
    /// is credited to no one; the signers earn their fees from the slack.
    function test_reject_unanimousBurnsSlashAndReopens() public {
        _accept(jobId, 50, _ckpt(50));
        uint256 held = usdc.balanceOf(address(escrow));
        bytes32 junk = keccak256("junk");
        bytes[] memory sigs = _allVotes(jobId, 1, 100, junk, false);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(jobId, 1, 100, junk, provider, MIN_STAKE, 7, 3 * FEE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.Slashed(provider, jobId, MIN_STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.EpochEnded(jobId, 1, JobEscrow.EndReason.Rejected);
        escrow.rejectCheckpoint(jobId, 1, 100, junk, sigs);

        (uint256 bonded,,, uint32 live) = escrow.stakeOf(provider);
        assertEq(bonded, 0, "slashed");
        assertEq(live, 0, "epoch ended");
        assertEq(escrow.burned(), MIN_STAKE, "burned");
        assertEq(usdc.balanceOf(address(escrow)), held, "the slash stays in the escrow");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "the client gets nothing");
        assertEq(escrow.withdrawable(v1, IERC20(address(usdc))), 0, "the verifiers get none of the slash");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "reopened");
        assertEq(j.lastAcceptedStep, 50, "accepted work kept");
        assertEq(j.remaining, 5e6 - 50_000 - 2 * FEE - 3 * FEE, "only the fees charged");
        assertEq(_paid(jobId, v3), 1, "v3 earned the reject's fee");

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

    /// A rejecting quorum that is not the whole committee ends the epoch and slashes nothing:
    /// `slashed` is 0 and there is no Slashed event; the member who did not sign keeps the
    /// provider's stake whole.
    function test_reject_notUnanimousEndsEpochWithoutSlash() public {
        bytes32 junk = keccak256("junk");
        bytes[] memory sigs = _quorumVotes(jobId, 1, 50, junk, false);
        vm.recordLogs();
        escrow.rejectCheckpoint(jobId, 1, 50, junk, sigs);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        assertEq(logs.length, 2, "two events: no Slashed");
        assertEq(logs[0].topics[0], JobEscrow.CheckpointRejected.selector, "CheckpointRejected first");
        assertEq(logs[0].data, abi.encode(uint64(50), junk, uint256(0), _bits(jobId, v1, v2), 2 * FEE), "slashed 0");
        assertEq(logs[1].topics[0], JobEscrow.EpochEnded.selector, "then EpochEnded");
        assertEq(logs[1].data, abi.encode(JobEscrow.EndReason.Rejected), "Rejected");

        (uint256 bonded,,, uint32 live) = escrow.stakeOf(provider);
        assertEq(bonded, MIN_STAKE, "stake whole");
        assertEq(live, 0, "epoch ended");
        assertEq(escrow.burned(), 0, "nothing burned");
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Open), "reopened");
        // the same provider may be assigned again with a new bid
        _assign(jobId, PROVIDER_PK, 1000);
        assertEq(escrow.getJob(jobId).epoch, 2, "epoch 2");
    }

    /// Reservation makes every reject slash exactly minStake: 1.5 × minStake cannot hold two
    /// epochs, 2 × minStake + 7 can, and two rejects leave exactly 7.
    function test_reject_slashesExactlyMinStakePerEpoch() public {
        _register(provider2, MIN_STAKE / 2);
        uint256 second = _defaultJob();
        _assign(second, PROVIDER2_PK, 1000);
        uint256 first = _defaultJob();
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory bid = _bidSig(PROVIDER2_PK, first, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(
            abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, MIN_STAKE + MIN_STAKE / 2, 2 * MIN_STAKE)
        );
        escrow.assign(first, provider2, 1000, expiry, bid);

        _register(provider2, MIN_STAKE / 2 + 7);
        vm.prank(client);
        escrow.assign(first, provider2, 1000, expiry, bid);
        escrow.rejectCheckpoint(first, 1, 50, _ckpt(50), _allVotes(first, 1, 50, _ckpt(50), false));
        (uint256 bonded,,,) = escrow.stakeOf(provider2);
        assertEq(bonded, MIN_STAKE + 7, "first reject: minStake");
        escrow.rejectCheckpoint(second, 1, 50, _ckpt(50), _allVotes(second, 1, 50, _ckpt(50), false));
        uint32 live;
        (bonded,,, live) = escrow.stakeOf(provider2);
        assertEq(bonded, 7, "second reject: minStake");
        assertEq(live, 0, "no epochs");
        assertEq(escrow.burned(), 2 * MIN_STAKE, "both burned");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 0, "the client got nothing");
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

    /// Expiry ends the live epoch, credits every member its fees (committee order, members
    /// that earned some), then the client the rest, exactly in that order of events.
    function test_expire_refundsUnspentAndEndsEpoch() public {
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 100, _ckpt(100));
        vm.warp(block.timestamp + DEADLINE_IN + GRACE);
        address[] memory committee = escrow.getJob(jobId).committee;
        vm.recordLogs();
        vm.prank(outsider);
        escrow.expire(jobId);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        assertEq(logs.length, 4, "EpochEnded, two FeesCredited, JobExpired");
        assertEq(logs[0].topics[0], JobEscrow.EpochEnded.selector, "the epoch ends first");
        assertEq(logs[0].data, abi.encode(JobEscrow.EndReason.Expired), "Expired");
        uint256 k = 1;
        for (uint256 i; i < 3; ++i) {
            if (committee[i] == v3) continue;
            assertEq(logs[k].topics[0], JobEscrow.FeesCredited.selector, "fees in committee order");
            assertEq(logs[k].topics[2], bytes32(uint256(uint160(committee[i]))), "member");
            assertEq(logs[k].data, abi.encode(FEE), "one fee");
            ++k;
        }
        assertEq(logs[3].topics[0], JobEscrow.JobExpired.selector, "the refund last");
        assertEq(logs[3].data, abi.encode(5e6 - 100_000 - 2 * FEE), "refund");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 5e6 - 100_000 - 2 * FEE, "refund");
        assertEq(escrow.withdrawable(provider, IERC20(address(usdc))), 100_000, "earned kept");
        assertEq(escrow.withdrawable(v1, IERC20(address(usdc))), FEE, "v1's fee");
        assertEq(escrow.withdrawable(v2, IERC20(address(usdc))), FEE, "v2's fee");
        assertEq(escrow.withdrawable(v3, IERC20(address(usdc))), 0, "v3 did not sign");
        assertTrue(!escrow.getJob(jobId).settled, "expire is not settle");
        (,,, uint32 live) = escrow.stakeOf(provider);
        assertEq(live, 0, "epoch ended");
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Expired), "expired");

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Expired));
        escrow.expire(jobId);
        // the provider may leave now
        vm.prank(provider);
        escrow.requestUnbond(MIN_STAKE);
    }

    function test_expire_unknownJob() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 5));
        escrow.expire(5);
    }

    /// A job whose committee was never drawn expires like any other: the whole budget back.
    function test_expire_fromDrawing() public {
        uint256 drawing = _createUndrawn(5e6, 10_000, 400, 50);
        JobEscrow.JobView memory j = escrow.getJob(drawing);
        vm.warp(uint256(j.deadline) + j.grace - 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, uint256(j.deadline) + j.grace));
        escrow.expire(drawing);
        vm.warp(uint256(j.deadline) + j.grace);
        vm.expectEmit(address(escrow));
        emit JobEscrow.JobExpired(drawing, 5e6);
        escrow.expire(drawing);
        assertEq(uint256(escrow.getJob(drawing).status), uint256(JobEscrow.Status.Expired), "expired");
        assertEq(escrow.withdrawable(client, IERC20(address(usdc))), 5e6, "whole budget back");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Expired));
        escrow.drawCommittee(drawing);
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
            IERC20(address(evil)), 1e6, 1, 10, 5, bytes32(0), 3, 2, FEE, uint64(block.timestamp) + 10, 0
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
