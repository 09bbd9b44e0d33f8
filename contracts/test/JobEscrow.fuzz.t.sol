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
        uint256 budget;
    }

    function _plan(uint256 maxPrice, uint64 total, uint64 interval, uint256 slack) internal returns (Plan memory p) {
        p.total = uint64(bound(total, 1, 100_000));
        p.interval = uint64(bound(interval, 1, p.total));
        // up to ~1e30 per step: the escrow books amounts up to uint128
        p.maxPrice = bound(maxPrice, 1, type(uint128).max / 2 / p.total);
        p.budget = p.maxPrice * p.total + bound(slack, 0, type(uint128).max / 2);
        usdc.mint(client, p.budget);
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

    /// One provider to the end at a fuzzed price, checkpoints at fuzzed multiples of the interval.
    function testFuzz_completion_conservesDeposit(
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 slack,
        uint256 price,
        uint256 stride
    ) public {
        Plan memory p = _plan(maxPrice, total, interval, slack);
        uint256 jobId = _createJob(p.budget, p.maxPrice, p.total, p.interval);
        price = bound(price, 1, p.maxPrice);
        _assign(jobId, PROVIDER_PK, price);

        uint64 step;
        uint256 expectedPaid;
        for (uint256 k; step < p.total && k < 8; ++k) {
            uint64 next = step + p.interval * uint64(bound(stride >> (k * 8), 1, 3));
            next = next - (next % p.interval);
            if (next > p.total || k == 7) next = p.total;
            expectedPaid += (next - step) * price;
            _accept(jobId, next, _ckpt(next));
            step = next;
        }
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Completed), "completed");
        assertEq(escrow.getJob(jobId).remaining, p.budget - expectedPaid, "the refund waits for settle");
        if (p.budget > expectedPaid) escrow.settle(jobId);

        uint256 paid = _withdrawAll(provider);
        uint256 refunded = _withdrawAll(client);
        assertEq(paid, expectedPaid, "paid per step at the price");
        assertEq(paid, uint256(p.total) * price, "every step paid once");
        assertEq(paid + refunded, p.budget, "payouts + refund == deposit");
        assertEq(usdc.balanceOf(address(escrow)), 2 * MIN_STAKE, "nothing else left behind");
    }

    /// Two providers at different prices, a replacement that loses unaccepted work, then expiry.
    function testFuzz_replacementAndExpiry_conservesDeposit(
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 slack,
        uint256 priceA,
        uint256 priceB,
        uint256 cut
    ) public {
        Plan memory p = _plan(maxPrice, total, interval, slack);
        uint256 jobId = _createJob(p.budget, p.maxPrice, p.total, p.interval);
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
        } else if (escrow.getJob(jobId).remaining != 0) {
            escrow.settle(jobId);
        }
        uint256 paidA = _withdrawAll(provider);
        uint256 paidB = _withdrawAll(provider2);
        uint256 refunded = _withdrawAll(client);
        assertEq(paidA, uint256(stepA) * priceA, "A paid for its accepted steps");
        assertEq(paidB, uint256(stepB - stepA) * priceB, "B paid from where A stopped");
        assertEq(paidA + paidB + refunded, p.budget, "payouts + refund == deposit");
    }

    /// Slashing burns exactly minStake of stake, never budget, and credits no one.
    function testFuzz_reject_burnsExactlyMinStake(uint256 extraStake, uint64 total, uint64 interval) public {
        extraStake = bound(extraStake, 0, 1_000e6);
        usdc.mint(provider, extraStake);
        if (extraStake > 0) _register(provider, extraStake);
        Plan memory p = _plan(1000, total, interval, 0);
        uint256 jobId = _createJob(p.budget, p.maxPrice, p.total, p.interval);
        _assign(jobId, PROVIDER_PK, p.maxPrice);
        uint64 epoch = _currentEpoch(jobId);
        escrow.rejectCheckpoint(jobId, epoch, p.interval, keccak256("junk"), _quorumVotes(jobId, epoch, p.interval, keccak256("junk"), false));
        (uint256 bonded,,,) = escrow.stakeOf(provider);
        assertEq(bonded, extraStake, "exactly minStake slashed");
        assertEq(escrow.burned(), MIN_STAKE, "and burned");
        assertEq(escrow.withdrawable(client, token), 0, "nothing credited to the client");
        assertEq(escrow.getJob(jobId).remaining, p.budget, "budget untouched");
        assertEq(usdc.balanceOf(address(escrow)), p.budget + 2 * MIN_STAKE + extraStake, "nothing left the escrow");
    }
}
