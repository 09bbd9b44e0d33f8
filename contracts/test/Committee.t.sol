// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {Vm} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev The verifier pool: staking, unbonding, withdrawing, and the pool's swap-remove order.
contract VerifierStakeTest is EscrowFixture {
    address internal a;
    address internal b;

    function setUp() public override {
        super.setUp();
        a = vm.addr(0xF1);
        b = vm.addr(0xF2);
    }

    function _vstake(address who)
        internal
        view
        returns (uint256 bonded, uint256 unbonding, uint64 at, bool pooled)
    {
        return escrow.verifierStakeOf(who);
    }

    function _assertPool(address[] memory want) internal view {
        assertEq(escrow.poolSize(), want.length, "pool size");
        for (uint256 i; i < want.length; ++i) {
            assertEq(escrow.poolAt(i), want[i], "pool entry");
        }
    }

    function _list(address x, address y, address z) internal pure returns (address[] memory l) {
        l = new address[](3);
        (l[0], l[1], l[2]) = (x, y, z);
    }

    function test_registerVerifier_stakesAndJoinsThePoolAtTheMinimum() public {
        _fund(a, MIN_VERIFIER_STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.VerifierStaked(a, MIN_VERIFIER_STAKE - 1, MIN_VERIFIER_STAKE - 1);
        vm.prank(a);
        escrow.registerVerifier(MIN_VERIFIER_STAKE - 1);
        (uint256 bonded, uint256 unbonding, uint64 at, bool pooled) = _vstake(a);
        assertEq(bonded, MIN_VERIFIER_STAKE - 1, "bonded");
        assertEq(unbonding + at, 0, "nothing unbonding");
        assertTrue(!pooled, "below the minimum: not pooled");
        assertEq(escrow.poolSize(), 3, "pool unchanged");

        vm.expectEmit(address(escrow));
        emit JobEscrow.VerifierStaked(a, 1, MIN_VERIFIER_STAKE);
        vm.prank(a);
        escrow.registerVerifier(1);
        (,,, pooled) = _vstake(a);
        assertTrue(pooled, "at the minimum: pooled");
        assertEq(escrow.poolSize(), 4, "appended");
        assertEq(escrow.poolAt(3), a, "at the end");
        assertEq(usdc.balanceOf(a), 0, "pulled exactly");

        // more stake does not append it twice
        _fund(a, 5);
        vm.prank(a);
        escrow.registerVerifier(5);
        assertEq(escrow.poolSize(), 4, "once in the pool");
        // a provider stake is a different stake
        (uint256 providerBonded,,,) = escrow.stakeOf(a);
        assertEq(providerBonded, 0, "no provider stake");
    }

    function test_registerVerifier_reverts() public {
        vm.prank(a);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.registerVerifier(0);
        vm.prank(a);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        escrow.registerVerifier(uint256(type(uint128).max) + 1);
        _fund(a, 10);
        vm.prank(a);
        escrow.registerVerifier(10);
        vm.prank(a);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.AmountTooLarge.selector));
        escrow.registerVerifier(type(uint128).max);
        vm.prank(a);
        vm.expectPartialRevert(bytes4(keccak256("ERC20InsufficientBalance(address,uint256,uint256)")));
        escrow.registerVerifier(1);
    }

    /// Unbonding moves bonded stake to unbonding and restarts the delay; falling below the
    /// minimum takes the verifier out of the pool, the last entry moving into its place.
    function test_requestVerifierUnbond_swapRemovesFromThePool() public {
        _stakeVerifier(a, MIN_VERIFIER_STAKE);
        _stakeVerifier(b, MIN_VERIFIER_STAKE);
        address[] memory pool = new address[](5);
        (pool[0], pool[1], pool[2], pool[3], pool[4]) = (v1, v2, v3, a, b);
        _assertPool(pool);

        // v2 leaves: b (the last) takes its place
        vm.expectEmit(address(escrow));
        emit JobEscrow.VerifierUnbondRequested(v2, 1, uint64(block.timestamp) + UNBOND_DELAY);
        vm.prank(v2);
        escrow.requestVerifierUnbond(1);
        address[] memory four = new address[](4);
        (four[0], four[1], four[2], four[3]) = (v1, b, v3, a);
        _assertPool(four);
        (uint256 bonded, uint256 unbonding, uint64 at, bool pooled) = _vstake(v2);
        assertEq(bonded, MIN_VERIFIER_STAKE - 1, "bonded");
        assertEq(unbonding, 1, "unbonding");
        assertEq(at, block.timestamp + UNBOND_DELAY, "delay");
        assertTrue(!pooled, "out of the pool");

        // a, the last entry, leaves: popped
        vm.prank(a);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        _assertPool(_list(v1, b, v3));
        // v1, the first, leaves: v3 moves to the front
        vm.prank(v1);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        address[] memory two = new address[](2);
        (two[0], two[1]) = (v3, b);
        _assertPool(two);
        // b unbonds a part and stays at the minimum: still pooled, in place
        _fund(b, 10);
        vm.prank(b);
        escrow.registerVerifier(10);
        vm.prank(b);
        escrow.requestVerifierUnbond(10);
        _assertPool(two);
        // and re-registering v2 appends it again
        _fund(v2, 1);
        vm.prank(v2);
        escrow.registerVerifier(1);
        address[] memory three = _list(v3, b, v2);
        _assertPool(three);
        // b, moved twice, leaves from where it is now: v2 (the last) takes its place
        vm.prank(b);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        (two[0], two[1]) = (v3, v2);
        _assertPool(two);
        // and v2, moved too, leaves as the last entry
        vm.prank(v2);
        escrow.requestVerifierUnbond(1);
        address[] memory one = new address[](1);
        one[0] = v3;
        _assertPool(one);
        (bonded, unbonding,,) = _vstake(v2);
        assertEq(bonded, MIN_VERIFIER_STAKE - 1, "below the minimum again");
        assertEq(unbonding, 2, "the unbonding parts add up");
    }

    function test_requestVerifierUnbond_reverts() public {
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.ZeroAmount.selector));
        escrow.requestVerifierUnbond(0);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, MIN_VERIFIER_STAKE, MIN_VERIFIER_STAKE + 1));
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE + 1);
        vm.prank(outsider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 0, 1));
        escrow.requestVerifierUnbond(1);
    }

    function test_withdrawVerifierStake_afterTheDelay() public {
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotUnbonding.selector));
        escrow.withdrawVerifierStake();
        vm.prank(v1);
        escrow.requestVerifierUnbond(20e6);
        vm.warp(block.timestamp + 1 days);
        vm.prank(v1);
        escrow.requestVerifierUnbond(10e6); // restarts the delay for all 30
        uint256 due = block.timestamp + UNBOND_DELAY;
        vm.warp(due - 1);
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, due));
        escrow.withdrawVerifierStake();
        vm.warp(due);
        uint256 before = usdc.balanceOf(v1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.VerifierStakeWithdrawn(v1, 30e6);
        vm.prank(v1);
        escrow.withdrawVerifierStake();
        assertEq(usdc.balanceOf(v1) - before, 30e6, "paid exactly the unbonding part");
        (uint256 bonded, uint256 unbonding, uint64 at,) = _vstake(v1);
        assertEq(bonded, MIN_VERIFIER_STAKE - 30e6, "bonded stays");
        assertEq(unbonding + at, 0, "cleared");
        vm.prank(v1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotUnbonding.selector));
        escrow.withdrawVerifierStake();
    }

    /// Verifier stake is never slashed nor reserved, and committee membership outlives pool
    /// membership: a member may leave the pool and take every unit of its stake back while
    /// its job runs, and still votes and earns its fees on it.
    function test_verifierStake_neverReserved_membershipOutlivesThePool() public {
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        uint256 before = usdc.balanceOf(v1);
        vm.prank(v1);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        assertEq(escrow.poolSize(), 2, "v1 left the pool");
        assertTrue(escrow.isVerifier(jobId, v1), "still on the committee");
        _accept(jobId, 50, _ckpt(50)); // v1 and v2 sign
        assertEq(_paid(jobId, v1), 1, "and still earns");

        vm.warp(block.timestamp + UNBOND_DELAY);
        vm.prank(v1);
        escrow.withdrawVerifierStake();
        assertEq(usdc.balanceOf(v1) - before, MIN_VERIFIER_STAKE, "every unit of its stake back");
        escrow.expire(jobId);
        assertEq(escrow.withdrawable(v1, IERC20(address(usdc))), FEE, "its fee credited");
        assertEq(escrow.burned(), 0, "nothing burned");
    }
}

/// @dev The draw: deterministic from the seed block's hash, the client excluded, the probe,
///      re-anchoring, and the pool checks.
contract DrawTest is EscrowFixture {
    address internal a;
    address internal b;

    function setUp() public override {
        super.setUp();
        a = vm.addr(0xF1);
        b = vm.addr(0xF2);
        _stakeVerifier(a, MIN_VERIFIER_STAKE);
        _stakeVerifier(b, MIN_VERIFIER_STAKE);
    }

    function _same(address[] memory x, address[] memory y) internal pure returns (bool) {
        return keccak256(abi.encode(x)) == keccak256(abi.encode(y));
    }

    /// @dev The first index a seat's keccak points at, before any probing.
    function _pick(bytes32 h, uint256 jobId, uint256 seat, uint256 poolLength) internal pure returns (uint256) {
        bytes32 seed = keccak256(abi.encode(h, jobId));
        return uint256(keccak256(abi.encode(seed, seat))) % poolLength;
    }

    function test_draw_isTheSpecsFunctionOfTheSeedBlockHash() public {
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 seedBlock = escrow.getJob(jobId).seedBlock;
        address[] memory pool = _pool();
        uint256 snap = vm.snapshotState();
        for (uint256 k; k < 4; ++k) {
            bytes32 h = keccak256(abi.encode("hash", k));
            vm.roll(seedBlock + 1 + k);
            vm.setBlockhash(seedBlock, h);
            address[] memory expected = _expectedCommittee(h, jobId, pool, client, 3);
            TermsInput memory t = _defaultTerms(jobId);
            t.committee = expected;
            vm.expectEmit(address(escrow));
            emit JobEscrow.CommitteeDrawn(jobId, expected, _expectedTerms(t));
            vm.prank(outsider);
            escrow.drawCommittee(jobId);
            JobEscrow.JobView memory j = escrow.getJob(jobId);
            assertTrue(_same(j.committee, expected), "the committee is the spec's draw");
            assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "open");
            assertEq(j.terms, _expectedTerms(t), "terms fixed at the draw");
            for (uint256 i; i < 3; ++i) {
                (uint8 index, uint64 paid) = escrow.memberOf(jobId, expected[i]);
                assertEq(index, i + 1, "1-based position");
                assertEq(paid, 0, "nothing earned yet");
            }
            vm.revertToState(snap);
        }
        // whoever draws, and whenever (within 256 blocks), the result is the same
        vm.roll(seedBlock + 200);
        bytes32 fixedHash = blockhash(seedBlock);
        escrow.drawCommittee(jobId);
        assertTrue(_same(escrow.getJob(jobId).committee, _expectedCommittee(fixedHash, jobId, pool, client, 3)), "same");
    }

    /// A committee of 5 from a pool of 10, the client pooled: the spec's draw again.
    function test_draw_largerPool() public {
        for (uint256 i; i < 4; ++i) {
            _stakeVerifier(vm.addr(0x2000 + i), MIN_VERIFIER_STAKE);
        }
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        assertEq(escrow.poolSize(), 10, "pool of 10");
        vm.prank(client);
        uint256 jobId = escrow.createJob(
            IERC20(address(usdc)), 5e6, 10_000, 400, 50, keccak256("spec"), 5, 3, FEE, uint64(block.timestamp) + 1 days, GRACE
        );
        address[] memory pool = _pool();
        vm.roll(block.number + 3);
        escrow.drawCommittee(jobId);
        address[] memory expected = _expectedCommittee(blockhash(block.number - 3), jobId, pool, client, 5);
        assertTrue(_same(escrow.getJob(jobId).committee, expected), "the spec's draw");
        assertTrue(!escrow.isVerifier(jobId, client), "never the client");
    }

    /// The probe: a seat whose pick is the client steps past it, and past an entry already
    /// drawn, wrapping around the end of the pool.
    function test_draw_probeSkipsClientAndTaken() public {
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        address[] memory pool = _pool(); // v1 v2 v3 a b client
        uint256 last = pool.length - 1;
        assertEq(pool[last], client, "the client is last");
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        // seat 0 picks pool[0]; seat 1 picks the client (last): it steps to pool[0] (wraps),
        // which is taken, then to pool[1]
        bytes32 h;
        for (uint256 k;; ++k) {
            h = keccak256(abi.encode("probe", k));
            if (_pick(h, jobId, 0, pool.length) == 0 && _pick(h, jobId, 1, pool.length) == last) break;
        }
        vm.roll(block.number + 1);
        vm.setBlockhash(escrow.getJob(jobId).seedBlock, h);
        escrow.drawCommittee(jobId);
        address[] memory c = escrow.getJob(jobId).committee;
        assertEq(c[0], pool[0], "seat 0: its pick");
        assertEq(c[1], pool[1], "seat 1: past the client, around the end, past the taken");
        assertTrue(_same(c, _expectedCommittee(h, jobId, pool, client, 3)), "the spec's draw");
    }

    /// Seat 1 picking what seat 0 took moves one on.
    function test_draw_probeSkipsTaken() public {
        address[] memory pool = _pool(); // v1 v2 v3 a b
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        bytes32 h;
        for (uint256 k;; ++k) {
            h = keccak256(abi.encode("taken", k));
            if (_pick(h, jobId, 0, 5) == 2 && _pick(h, jobId, 1, 5) == 2) break;
        }
        vm.roll(block.number + 1);
        vm.setBlockhash(escrow.getJob(jobId).seedBlock, h);
        escrow.drawCommittee(jobId);
        address[] memory c = escrow.getJob(jobId).committee;
        assertEq(c[0], pool[2], "seat 0");
        assertEq(c[1], pool[3], "seat 1 moved on");
    }

    function test_draw_revertsAndCheckOrder() public {
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.UnknownJob.selector, 1));
        escrow.drawCommittee(1);
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 seedBlock = uint64(block.number);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.SeedNotMined.selector, seedBlock));
        escrow.drawCommittee(jobId);
        // the pool shrinking does not come before the seed check
        vm.prank(a);
        escrow.requestVerifierUnbond(1);
        vm.prank(b);
        escrow.requestVerifierUnbond(1);
        vm.prank(v3);
        escrow.requestVerifierUnbond(1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.SeedNotMined.selector, seedBlock));
        escrow.drawCommittee(jobId);
        // (the pool shrank in the seed block itself: that is the pool the draw takes)
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 2, 3));
        escrow.drawCommittee(jobId);
        // the client joins the pool after the seed block: the seed moves first
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CommitteeSeedMoved(jobId, seedBlock + 1);
        escrow.drawCommittee(jobId);
        // and a pooled client does not count
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 2, 3));
        escrow.drawCommittee(jobId);
        // the pool grows back: the seed moves once more, then the draw takes that pool
        _stakeVerifier(outsider, MIN_VERIFIER_STAKE);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CommitteeSeedMoved(jobId, seedBlock + 2);
        escrow.drawCommittee(jobId);
        vm.roll(block.number + 1);
        escrow.drawCommittee(jobId);
        assertTrue(escrow.isVerifier(jobId, outsider), "drawn from the pool of the seed block");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.drawCommittee(jobId);
    }

    /// Over 256 blocks later the seed block's hash is gone: the seed moves to the current
    /// block (and nothing else changes), then the draw takes that block's hash in a later one.
    function test_draw_reanchorsAfter256Blocks() public {
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 seedBlock = uint64(block.number);
        uint256 snap = vm.snapshotState();
        // 256 blocks later the hash is still there
        vm.roll(seedBlock + 256);
        bytes32 h = blockhash(seedBlock);
        assertTrue(h != bytes32(0), "in reach");
        escrow.drawCommittee(jobId);
        assertTrue(_same(escrow.getJob(jobId).committee, _expectedCommittee(h, jobId, _pool(), client, 3)), "drawn");
        vm.revertToState(snap);

        vm.roll(seedBlock + 257);
        assertEq(blockhash(seedBlock), bytes32(0), "out of reach");
        JobEscrow.JobView memory before = escrow.getJob(jobId);
        vm.recordLogs();
        escrow.drawCommittee(jobId);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        assertEq(logs.length, 1, "one event");
        assertEq(logs[0].topics[0], JobEscrow.CommitteeSeedMoved.selector, "CommitteeSeedMoved");
        assertEq(logs[0].data, abi.encode(uint64(seedBlock + 257)), "to the current block");
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(j.seedBlock, seedBlock + 257, "seed moved");
        before.seedBlock = j.seedBlock;
        assertEq(keccak256(abi.encode(j)), keccak256(abi.encode(before)), "nothing else changed");
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.SeedNotMined.selector, seedBlock + 257));
        escrow.drawCommittee(jobId);

        // a pool that shrank meanwhile does not stop the move, only the draw
        vm.roll(seedBlock + 257 + 300);
        vm.prank(a);
        escrow.requestVerifierUnbond(1);
        vm.prank(b);
        escrow.requestVerifierUnbond(1);
        vm.prank(v3);
        escrow.requestVerifierUnbond(1);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CommitteeSeedMoved(jobId, seedBlock + 557);
        escrow.drawCommittee(jobId);
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NotEnoughVerifiers.selector, 2, 3));
        escrow.drawCommittee(jobId);
        _stakeVerifier(outsider, MIN_VERIFIER_STAKE);
        escrow.drawCommittee(jobId); // the pool changed after the seed: the seed moves again
        assertEq(escrow.getJob(jobId).seedBlock, seedBlock + 558, "moved again");
        vm.roll(block.number + 1);
        address[] memory pool = _pool();
        bytes32 moved = blockhash(seedBlock + 558);
        escrow.drawCommittee(jobId);
        assertTrue(_same(escrow.getJob(jobId).committee, _expectedCommittee(moved, jobId, pool, client, 3)), "drawn");
    }

    /// The draw takes the pool as it was at the end of the seed block: a change in the seed
    /// block itself (before its hash exists) is part of it; a change in a later block moves
    /// the seed to the block of the draw call, and the draw then takes that block's hash and
    /// pool.
    function test_draw_poolChangeAfterTheSeedBlockMovesTheSeed() public {
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 seedBlock = uint64(block.number);
        address w = vm.addr(0xF3);
        _stakeVerifier(w, MIN_VERIFIER_STAKE); // same block
        assertEq(escrow.poolChangedAt(), seedBlock, "changed in the seed block");
        address[] memory pool = _pool();
        vm.roll(seedBlock + 1);
        escrow.drawCommittee(jobId);
        assertTrue(
            _same(escrow.getJob(jobId).committee, _expectedCommittee(blockhash(seedBlock), jobId, pool, client, 3)),
            "drawn over the seed block's pool"
        );

        uint256 other = _createUndrawn(5e6, 10_000, 400, 50);
        vm.roll(block.number + 1);
        vm.prank(w);
        escrow.requestVerifierUnbond(1); // a later block: the pool is not the seed block's
        assertEq(escrow.poolChangedAt(), block.number, "changed later");
        JobEscrow.JobView memory before = escrow.getJob(other);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CommitteeSeedMoved(other, uint64(block.number));
        escrow.drawCommittee(other);
        JobEscrow.JobView memory j = escrow.getJob(other);
        assertEq(j.seedBlock, block.number, "the seed is the block of the call");
        before.seedBlock = j.seedBlock;
        assertEq(keccak256(abi.encode(j)), keccak256(abi.encode(before)), "nothing else changed");
        pool = _pool();
        vm.roll(block.number + 1);
        escrow.drawCommittee(other);
        assertTrue(
            _same(escrow.getJob(other).committee, _expectedCommittee(blockhash(j.seedBlock), other, pool, client, 3)),
            "drawn over the new seed and the pool"
        );
        // a stake change that keeps the pool as it is (a top-up, a partial unbond above the
        // minimum) is no change
        uint256 third = _createUndrawn(5e6, 10_000, 400, 50);
        uint64 changed = escrow.poolChangedAt();
        vm.roll(block.number + 1);
        _stakeVerifier(v1, 7);
        vm.prank(v1);
        escrow.requestVerifierUnbond(7);
        assertEq(escrow.poolChangedAt(), changed, "no change");
        escrow.drawCommittee(third);
        assertEq(uint256(escrow.getJob(third).status), uint256(JobEscrow.Status.Open), "drawn");
    }

    /// A pooled client is never drawn, even when the pool is exactly large enough without it.
    function test_draw_neverTheClient() public {
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        vm.prank(client);
        uint256 jobId = escrow.createJob(
            IERC20(address(usdc)), 5e6, 10_000, 400, 50, keccak256("spec"), 5, 3, FEE, uint64(block.timestamp) + 1 days, GRACE
        );
        for (uint256 k; k < 8; ++k) {
            uint256 snap = vm.snapshotState();
            vm.roll(block.number + 1);
            vm.setBlockhash(block.number - 1, keccak256(abi.encode("client", k)));
            escrow.drawCommittee(jobId);
            assertTrue(!escrow.isVerifier(jobId, client), "never the client");
            assertEq(escrow.getJob(jobId).committee.length, 5, "five others");
            vm.revertToState(snap);
        }
    }
}

/// @dev Fees: who earns them, when they leave `remaining`, the slack rule for rejects, and
///      their crediting by settle and expire.
contract FeeTest is EscrowFixture {
    uint256 internal jobId;

    function setUp() public override {
        super.setUp();
        jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
    }

    /// `voters` is the bit set of committee positions, whatever the order of `sigs`.
    function test_fees_votersBitsetIndependentOfOrder() public {
        (uint8 i1,) = escrow.memberOf(jobId, v1);
        (uint8 i3,) = escrow.memberOf(jobId, v3);
        uint256 want = (1 << (i1 - 1)) | (1 << (i3 - 1));
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50_000, want, 2 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), _votes(jobId, 1, 50, _ckpt(50), true, _pks(V3_PK, V1_PK)));
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 100, _ckpt(100), provider, 50_000, want, 2 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), _votes(jobId, 1, 100, _ckpt(100), true, _pks(V1_PK, V3_PK)));
        assertEq(_paid(jobId, v1), 2, "v1");
        assertEq(_paid(jobId, v3), 2, "v3");
        assertEq(_paid(jobId, v2), 0, "v2 silent");
        (uint8 index, uint64 paid) = escrow.memberOf(jobId, outsider);
        assertEq(index, 0, "not a member");
        assertEq(paid, 0, "nothing");
    }

    /// A reject pays its signers only from the slack: exactly at the boundary it pays, one
    /// unit below it pays nothing and no member's count moves.
    function test_fees_rejectPaysOnlyFromSlack() public {
        // needed: 10_000 × 400 + FEE × 3 × 8; slack: exactly two fees
        uint256 needed = 10_000 * 400 + FEE * 3 * 8;
        vm.prank(client);
        uint256 tight = escrow.createJob(
            IERC20(address(usdc)), needed + 2 * FEE, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, uint64(block.timestamp) + 1 days, GRACE
        );
        _draw(tight);
        _assign(tight, PROVIDER2_PK, 10_000);
        bytes32 junk = keccak256("junk");
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(tight, 1, 50, junk, provider2, 0, _bits(tight, v1, v2), 2 * FEE);
        escrow.rejectCheckpoint(tight, 1, 50, junk, _quorumVotes(tight, 1, 50, junk, false));
        assertEq(escrow.getJob(tight).remaining, needed, "the slack is spent");
        assertEq(_paid(tight, v1), 1, "paid");

        _assign(tight, PROVIDER2_PK, 10_000);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(tight, 2, 50, junk, provider2, 0, _bits(tight, v1, v2), 0);
        escrow.rejectCheckpoint(tight, 2, 50, junk, _quorumVotes(tight, 2, 50, junk, false));
        assertEq(escrow.getJob(tight).remaining, needed, "no slack, no fee");
        assertEq(_paid(tight, v1), 1, "the count did not move");
        assertEq(_paid(tight, v2), 1, "the count did not move");

        // the rest of the job is still fully covered: every step at the maximum price, and
        // every accept's fees
        _assign(tight, PROVIDER2_PK, 10_000);
        for (uint64 step = 50; step <= 400; step += 50) {
            escrow.acceptCheckpoint(tight, 3, step, _ckpt(step), _allVotes(tight, 3, step, _ckpt(step), true));
        }
        assertEq(escrow.getJob(tight).remaining, 0, "spent to the unit");
        escrow.settle(tight);
        assertEq(escrow.withdrawable(provider2, IERC20(address(usdc))), 10_000 * 400, "all steps paid");
    }

    /// After accepted steps the reserve shrinks with them: the slack rule is taken at the
    /// current head.
    function test_fees_rejectSlackAtTheHead() public {
        uint256 needed = 10_000 * 400 + FEE * 3 * 8;
        vm.prank(client);
        uint256 tight = escrow.createJob(
            IERC20(address(usdc)), needed, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, uint64(block.timestamp) + 1 days, GRACE
        );
        _draw(tight);
        _assign(tight, PROVIDER2_PK, 1_000); // a tenth of the maximum price
        escrow.acceptCheckpoint(tight, 1, 50, _ckpt(50), _quorumVotes(tight, 1, 50, _ckpt(50), true));
        // slack now: 50 steps × 9_000 saved + one fee (two signers of three)
        uint256 slack = 50 * 9_000 + FEE;
        assertEq(escrow.getJob(tight).remaining, 10_000 * 350 + FEE * 3 * 7 + slack, "remaining");
        bytes32 junk = keccak256("junk");
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointRejected(tight, 1, 100, junk, provider2, MIN_STAKE, 7, 3 * FEE);
        escrow.rejectCheckpoint(tight, 1, 100, junk, _allVotes(tight, 1, 100, junk, false));
    }

    /// A late accept pays its signers as any accept does.
    function test_fees_lateAcceptPaysFees() public {
        vm.prank(client);
        escrow.releaseProvider(jobId);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50_000, 7, 3 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), _allVotes(jobId, 1, 50, _ckpt(50), true));
        assertEq(escrow.getJob(jobId).remaining, 5e6 - 50_000 - 3 * FEE, "fees charged");
        assertEq(_paid(jobId, v3), 1, "counted");
    }

    /// Settle and expire credit each member `paid × fee`, in committee order, skipping members
    /// that earned nothing, before the refund; fees are credited once.
    function test_fees_creditedOnceBySettle() public {
        _accept(jobId, 50, _ckpt(50));
        escrow.rejectCheckpoint(jobId, 1, 100, keccak256("junk"), _votes(jobId, 1, 100, keccak256("junk"), false, _pks(V2_PK, V3_PK)));
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 400, _ckpt(400));
        // v1: 2, v2: 3, v3: 1
        address[] memory c = escrow.getJob(jobId).committee;
        vm.recordLogs();
        escrow.settle(jobId);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        assertEq(logs.length, 4, "three FeesCredited and JobSettled");
        for (uint256 i; i < 3; ++i) {
            assertEq(logs[i].topics[0], JobEscrow.FeesCredited.selector, "FeesCredited");
            assertEq(logs[i].topics[2], bytes32(uint256(uint160(c[i]))), "committee order");
            assertEq(logs[i].data, abi.encode(_paid(jobId, c[i]) * FEE), "paid x fee");
        }
        assertEq(logs[3].topics[0], JobEscrow.JobSettled.selector, "JobSettled last");
        IERC20 t = IERC20(address(usdc));
        assertEq(escrow.withdrawable(v1, t), 2 * FEE, "v1");
        assertEq(escrow.withdrawable(v2, t), 3 * FEE, "v2");
        assertEq(escrow.withdrawable(v3, t), FEE, "v3");
        assertEq(
            escrow.withdrawable(provider, t) + 6 * FEE + escrow.withdrawable(client, t), 5e6, "paid + fees + refund"
        );
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.NothingToSettle.selector));
        escrow.settle(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Completed));
        escrow.expire(jobId);
        assertEq(escrow.withdrawable(v2, t), 3 * FEE, "credited once");
    }
}

/// @dev The exact events of each call, in order, as the differential test compares them.
contract EventOrderTest is EscrowFixture {
    function _escrowTopics(Vm.Log[] memory logs) internal view returns (bytes32[] memory t) {
        uint256 n;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].emitter == address(escrow)) ++n;
        }
        t = new bytes32[](n);
        n = 0;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].emitter == address(escrow)) t[n++] = logs[i].topics[0];
        }
    }

    function _expect(bytes32[] memory got, bytes32[] memory want) internal pure {
        assertEq(got.length, want.length, "event count");
        for (uint256 i; i < want.length; ++i) {
            assertEq(got[i], want[i], "event order");
        }
    }

    function _one(bytes32 x) internal pure returns (bytes32[] memory w) {
        w = new bytes32[](1);
        w[0] = x;
    }

    function _two(bytes32 x, bytes32 y) internal pure returns (bytes32[] memory w) {
        w = new bytes32[](2);
        (w[0], w[1]) = (x, y);
    }

    function _three(bytes32 x, bytes32 y, bytes32 z) internal pure returns (bytes32[] memory w) {
        w = new bytes32[](3);
        (w[0], w[1], w[2]) = (x, y, z);
    }

    function test_events_lifecycle() public {
        vm.recordLogs();
        uint256 jobId = _createUndrawn(5e6, 10_000, 400, 50);
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.JobCreated.selector));
        vm.roll(block.number + 1);
        vm.recordLogs();
        escrow.drawCommittee(jobId);
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.CommitteeDrawn.selector));

        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        vm.recordLogs();
        _assign(jobId, PROVIDER_PK, 1000);
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.ProviderAssigned.selector));
        vm.recordLogs();
        _assign(jobId, PROVIDER2_PK, 1000);
        _expect(
            _escrowTopics(vm.getRecordedLogs()), _two(JobEscrow.EpochEnded.selector, JobEscrow.ProviderAssigned.selector)
        );
        vm.recordLogs();
        _accept(jobId, 50, _ckpt(50));
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.CheckpointAccepted.selector));
        vm.recordLogs();
        escrow.rejectCheckpoint(jobId, 2, 100, _ckpt(100), _allVotes(jobId, 2, 100, _ckpt(100), false));
        _expect(
            _escrowTopics(vm.getRecordedLogs()),
            _three(JobEscrow.CheckpointRejected.selector, JobEscrow.Slashed.selector, JobEscrow.EpochEnded.selector)
        );
        _assign(jobId, PROVIDER_PK, 1000);
        vm.recordLogs();
        _accept(jobId, 400, _ckpt(400));
        _expect(
            _escrowTopics(vm.getRecordedLogs()),
            _three(JobEscrow.CheckpointAccepted.selector, JobEscrow.EpochEnded.selector, JobEscrow.JobCompleted.selector)
        );
        vm.recordLogs();
        escrow.settle(jobId);
        bytes32[] memory want = new bytes32[](4);
        (want[0], want[1], want[2], want[3]) = (
            JobEscrow.FeesCredited.selector,
            JobEscrow.FeesCredited.selector,
            JobEscrow.FeesCredited.selector,
            JobEscrow.JobSettled.selector
        );
        _expect(_escrowTopics(vm.getRecordedLogs()), want);
    }

    function test_events_lateAcceptSupersedingToCompletion() public {
        uint256 jobId = _createJob(1e6, 10_000, 60, 50);
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 50, _ckpt(50));
        _assign(jobId, PROVIDER2_PK, 1000);
        vm.recordLogs();
        escrow.acceptCheckpoint(jobId, 1, 60, _ckpt(60), _quorumVotes(jobId, 1, 60, _ckpt(60), true));
        _expect(
            _escrowTopics(vm.getRecordedLogs()),
            _three(JobEscrow.CheckpointAccepted.selector, JobEscrow.EpochEnded.selector, JobEscrow.JobCompleted.selector)
        );
    }

    function test_events_stakes() public {
        address w = vm.addr(0xF3);
        _fund(w, MIN_VERIFIER_STAKE);
        vm.recordLogs();
        vm.prank(w);
        escrow.registerVerifier(MIN_VERIFIER_STAKE);
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.VerifierStaked.selector));
        vm.recordLogs();
        vm.prank(w);
        escrow.requestVerifierUnbond(MIN_VERIFIER_STAKE);
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.VerifierUnbondRequested.selector));
        vm.warp(block.timestamp + UNBOND_DELAY);
        vm.recordLogs();
        vm.prank(w);
        escrow.withdrawVerifierStake();
        _expect(_escrowTopics(vm.getRecordedLogs()), _one(JobEscrow.VerifierStakeWithdrawn.selector));
    }
}
