// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev Rounding and conservation: whatever the amounts, steps, prices and path, what the
///      providers and the client withdraw adds up to the deposit exactly.
contract JobEscrowFuzzTest is EscrowFixture {
    IERC20 internal token;

    function setUp() public override {
        super.setUp();
        token = IERC20(address(usdc));
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
    }

    struct Plan {
        uint256 maxPrice;
        uint64 total;
        uint64 interval;
        uint256 fee;
        uint256 budget;
    }

    uint256 internal constant CAP = type(uint96).max;

    function _checkpoints(Plan memory p) internal pure returns (uint256) {
        return (uint256(p.total) + p.interval - 1) / p.interval;
    }

    function _plan(uint256 maxPrice, uint64 total, uint64 interval, uint256 fee, uint256 slack)
        internal
        returns (Plan memory p)
    {
        p.total = uint64(bound(total, 1, 100_000));
        p.interval = uint64(bound(interval, 1, p.total));
        // up to ~2e24 per step and per fee: the escrow books job amounts up to uint96
        p.maxPrice = bound(maxPrice, 1, CAP / 4 / p.total);
        p.fee = bound(fee, 0, CAP / 4 / (3 * _checkpoints(p)));
        p.budget = p.maxPrice * p.total + p.fee * 3 * _checkpoints(p) + bound(slack, 0, CAP / 4);
        usdc.mint(client, p.budget);
    }

    function _create(Plan memory p) internal returns (uint256 jobId) {
        vm.prank(client);
        jobId = escrow.createJob(
            token, p.budget, p.maxPrice, p.total, p.interval, keccak256("spec"), 3, 2, p.fee, uint64(block.timestamp) + DEADLINE_IN, GRACE
        );
        _draw(jobId);
    }

    function _withdrawAll(address who) internal returns (uint256 got) {
        uint256 owed = escrow.withdrawable(who, token);
        if (owed == 0) return 0;
        uint256 before = usdc.balanceOf(who);
        vm.prank(who);
        escrow.withdraw(token);
        got = usdc.balanceOf(who) - before;
        assertEq(got, owed, "withdrawn what was owed");
    }

    function _withdrawFees() internal returns (uint256) {
        return _withdrawAll(v1) + _withdrawAll(v2) + _withdrawAll(v3);
    }

    /// One provider to the end at a fuzzed price and fee, checkpoints at fuzzed multiples of
    /// the interval: paid + fees + refund == deposit, to the unit.
    function testFuzz_completion_conservesDeposit(
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 fee,
        uint256 slack,
        uint256 price,
        uint256 stride
    ) public {
        Plan memory p = _plan(maxPrice, total, interval, fee, slack);
        uint256 jobId = _create(p);
        price = bound(price, 1, p.maxPrice);
        _assign(jobId, PROVIDER_PK, price);

        uint64 step;
        uint256 expectedPaid;
        uint256 decisions;
        for (uint256 k; step < p.total && k < 8; ++k) {
            uint64 next = step + p.interval * uint64(bound(stride >> (k * 8), 1, 3));
            next = next - (next % p.interval);
            if (next > p.total || k == 7) next = p.total;
            expectedPaid += (next - step) * price;
            _accept(jobId, next, _ckpt(next));
            ++decisions;
            step = next;
        }
        uint256 expectedFees = 2 * p.fee * decisions;
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Completed), "completed");
        assertEq(escrow.getJob(jobId).remaining, p.budget - expectedPaid - expectedFees, "the refund waits for settle");
        escrow.settle(jobId);

        uint256 paid = _withdrawAll(provider);
        uint256 fees = _withdrawFees();
        uint256 refunded = _withdrawAll(client);
        assertEq(paid, expectedPaid, "paid per step at the price");
        assertEq(paid, uint256(p.total) * price, "every step paid once");
        assertEq(fees, expectedFees, "two fees per decision");
        assertEq(paid + fees + refunded, p.budget, "payouts + fees + refund == deposit");
        assertEq(
            usdc.balanceOf(address(escrow)), 2 * MIN_STAKE + 3 * MIN_VERIFIER_STAKE, "nothing else left behind"
        );
    }

    /// Two providers at different prices, a replacement that loses unaccepted work, then expiry.
    function testFuzz_replacementAndExpiry_conservesDeposit(
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 fee,
        uint256 slack,
        uint256 priceA,
        uint256 priceB,
        uint256 cut
    ) public {
        Plan memory p = _plan(maxPrice, total, interval, fee, slack);
        uint256 jobId = _create(p);
        priceA = bound(priceA, 1, p.maxPrice);
        priceB = bound(priceB, 1, p.maxPrice);

        _assign(jobId, PROVIDER_PK, priceA);
        uint64 intervals = p.total / p.interval;
        uint64 stepA = p.interval * uint64(bound(cut, 0, intervals));
        if (stepA == p.total) stepA = 0;
        if (stepA > 0) _accept(jobId, stepA, _ckpt(stepA));

        _assign(jobId, PROVIDER2_PK, priceB);
        uint64 stepB = stepA + p.interval;
        bool finishes = stepB >= p.total;
        if (finishes) stepB = p.total;
        _accept(jobId, stepB, _ckpt(stepB));

        if (!finishes) {
            vm.warp(block.timestamp + DEADLINE_IN + GRACE);
            escrow.expire(jobId);
        } else {
            escrow.settle(jobId);
        }
        uint256 paidA = _withdrawAll(provider);
        uint256 paidB = _withdrawAll(provider2);
        uint256 fees = _withdrawFees();
        uint256 refunded = _withdrawAll(client);
        assertEq(paidA, uint256(stepA) * priceA, "A paid for its accepted steps");
        assertEq(paidB, uint256(stepB - stepA) * priceB, "B paid from where A stopped");
        assertEq(fees, 2 * p.fee * (stepA > 0 ? 2 : 1), "two fees per decision");
        assertEq(paidA + paidB + fees + refunded, p.budget, "payouts + fees + refund == deposit");
    }

    /// A unanimous reject burns exactly minStake of stake, never budget, and credits no one;
    /// a reject by a bare quorum burns nothing.
    function testFuzz_reject_burnsExactlyMinStakeOnlyWhenUnanimous(
        uint256 extraStake,
        uint64 total,
        uint64 interval,
        bool unanimous
    ) public {
        extraStake = bound(extraStake, 0, 1_000e6);
        usdc.mint(provider, extraStake);
        if (extraStake > 0) _register(provider, extraStake);
        Plan memory p = _plan(1000, total, interval, 0, 0);
        uint256 jobId = _create(p);
        _assign(jobId, PROVIDER_PK, p.maxPrice);
        uint64 epoch = _currentEpoch(jobId);
        bytes32 junk = keccak256("junk");
        bytes[] memory sigs = unanimous
            ? _allVotes(jobId, epoch, p.interval, junk, false)
            : _quorumVotes(jobId, epoch, p.interval, junk, false);
        escrow.rejectCheckpoint(jobId, epoch, p.interval, junk, sigs);
        uint256 slashed = unanimous ? MIN_STAKE : 0;
        (uint256 bonded,,,) = escrow.stakeOf(provider);
        assertEq(bonded, MIN_STAKE + extraStake - slashed, "exactly minStake slashed, only when unanimous");
        assertEq(escrow.burned(), slashed, "and burned");
        assertEq(escrow.withdrawable(client, token), 0, "nothing credited to the client");
        assertEq(escrow.getJob(jobId).remaining, p.budget, "budget untouched");
        assertEq(
            usdc.balanceOf(address(escrow)),
            p.budget + 2 * MIN_STAKE + extraStake + 3 * MIN_VERIFIER_STAKE,
            "nothing left the escrow"
        );
    }

    /// A reject's fees come only from the slack: with a budget `slack` above what the job
    /// needs, a reject by `n` members pays `n × fee` exactly when `n × fee ≤ slack`, and
    /// `remaining` never drops below what the rest of the job can cost.
    function testFuzz_reject_feesOnlyFromSlack(uint256 fee, uint256 slack, bool three) public {
        fee = bound(fee, 1, 1e12);
        slack = bound(slack, 0, 4 * fee);
        uint256 needed = 10_000 * 400 + fee * 3 * 8;
        uint256 jobId = _slackJob(needed + slack, fee);
        bytes32 junk = keccak256("junk");
        bytes[] memory sigs = three ? _allVotes(jobId, 1, 50, junk, false) : _quorumVotes(jobId, 1, 50, junk, false);
        uint256 charged = (three ? 3 : 2) * fee;
        if (charged > slack) charged = 0;
        uint256 voters = three ? 7 : _bits(jobId, v1, v2);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(jobId, 1, 50, junk, provider, three ? MIN_STAKE : 0, voters, charged);
        escrow.rejectCheckpoint(jobId, 1, 50, junk, sigs);
        uint256 remaining = escrow.getJob(jobId).remaining;
        assertEq(remaining, needed + slack - charged, "fees from the slack only");
        assertTrue(remaining >= needed, "the rest of the job is covered");
        assertEq(_paid(jobId, v1), charged != 0 ? 1 : 0, "paid moves only when the fee is paid");
    }

    function _slackJob(uint256 budget, uint256 fee) internal returns (uint256 jobId) {
        usdc.mint(client, budget);
        vm.prank(client);
        jobId = escrow.createJob(
            token, budget, 10_000, 400, 50, keccak256("spec"), 3, 2, fee, uint64(block.timestamp) + DEADLINE_IN, GRACE
        );
        _draw(jobId);
        _assign(jobId, PROVIDER_PK, 10_000);
    }
}
