// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {EscrowFixture} from "./utils/EscrowFixture.sol";
import {Vm} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev One test per symptom of issue 15 that is this contract's (1, 2, 3, 4, 6, 7; 5 is the
///      provider node's). Each plays the attack through and asserts that the attacker gains
///      nothing and that the honest party ends with exactly what the rules promise, to the unit.
contract AttacksTest is EscrowFixture {
    // keys the client controls: its sybils in the verifier pool
    uint256 internal constant PUPPET1_PK = 0xD1;
    uint256 internal constant PUPPET2_PK = 0xD2;
    uint256 internal constant PUPPET3_PK = 0xD3;
    uint256 internal constant BUDGET = 5e6;

    IERC20 internal token;

    function setUp() public override {
        super.setUp();
        token = IERC20(address(usdc));
    }

    function _puppets() internal pure returns (address[] memory vs) {
        vs = new address[](3);
        vs[0] = vm.addr(PUPPET1_PK);
        vs[1] = vm.addr(PUPPET2_PK);
        vs[2] = vm.addr(PUPPET3_PK);
    }

    /// @dev The client's own money behind its sybils' stake: minted to the client, sent on.
    function _stakePuppet(uint256 pk) internal {
        address p = vm.addr(pk);
        vm.prank(client);
        usdc.transfer(p, MIN_VERIFIER_STAKE);
        vm.startPrank(p);
        usdc.approve(address(escrow), type(uint256).max);
        escrow.registerVerifier(MIN_VERIFIER_STAKE);
        vm.stopPrank();
    }

    function _leavePool(address v) internal {
        (uint256 bonded,,,) = escrow.verifierStakeOf(v);
        vm.prank(v);
        escrow.requestVerifierUnbond(bonded);
    }

    /// @dev What the client and its sybils hold together, in the escrow's books and out of it,
    ///      stake included: the attacker's whole wealth.
    function _attackerWealth() internal view returns (uint256 w) {
        w = usdc.balanceOf(client) + escrow.withdrawable(client, token);
        address[] memory ps = _puppets();
        for (uint256 i; i < ps.length; ++i) {
            (uint256 bonded, uint256 unbonding,,) = escrow.verifierStakeOf(ps[i]);
            w += usdc.balanceOf(ps[i]) + escrow.withdrawable(ps[i], token) + bonded + unbonding;
        }
    }

    function _reject(uint256 jobId, uint64 step, uint256[] memory pks) internal {
        uint64 epoch = _currentEpoch(jobId);
        bytes32 honest = _ckpt(step);
        escrow.rejectCheckpoint(jobId, epoch, step, honest, _votes(jobId, epoch, step, honest, false, pks));
    }

    function _bonded(address who) internal view returns (uint256 bonded) {
        (bonded,,,) = escrow.stakeOf(who);
    }

    function _live(address who) internal view returns (uint32 live) {
        (,,, live) = escrow.stakeOf(who);
    }

    /// The client expires the job once it may and takes everything credited to it.
    function _clientExits(uint256 jobId) internal {
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        vm.warp(uint256(j.deadline) + j.grace);
        escrow.expire(jobId);
        vm.prank(client);
        escrow.withdraw(token);
    }

    /// The sybils take their fees out too.
    function _puppetsWithdraw() internal {
        address[] memory ps = _puppets();
        for (uint256 i; i < ps.length; ++i) {
            if (escrow.withdrawable(ps[i], token) == 0) continue;
            vm.prank(ps[i]);
            escrow.withdraw(token);
        }
    }

    // ------------------------------------------------ symptom 1: rejects for profit

    /// The client cannot choose the committee: `createJob` names no one, the draw is the
    /// spec's function of the seed block's hash and the pool (computed here independently),
    /// and the client is never drawn even when it is pooled and the hash points at it. Drawing
    /// again, or drawing another way, is refused: the result was fixed when the block was.
    function test_symptom1_clientCannotChooseTheCommittee() public {
        _stakeVerifier(client, MIN_VERIFIER_STAKE);
        _stakePuppet(PUPPET1_PK);
        _stakePuppet(PUPPET2_PK);
        address[] memory pool = _pool();
        assertEq(pool.length, 6, "v1 v2 v3 client p1 p2");
        uint256 clientSlot = 3;
        assertEq(pool[clientSlot], client, "the client's pool slot");

        uint256 jobId = _createUndrawn(BUDGET, 10_000, 400, 50);
        // a seed block hash whose first pick is the client's own slot
        bytes32 h;
        for (uint256 k;; ++k) {
            h = keccak256(abi.encode("seed", k));
            bytes32 seed = keccak256(abi.encode(h, jobId));
            if (uint256(keccak256(abi.encode(seed, uint256(0)))) % pool.length == clientSlot) break;
        }
        vm.roll(block.number + 1);
        vm.setBlockhash(escrow.getJob(jobId).seedBlock, h);
        vm.prank(client);
        escrow.drawCommittee(jobId);
        address[] memory committee = escrow.getJob(jobId).committee;
        address[] memory expected = _expectedCommittee(h, jobId, pool, client, 3);
        assertEq(keccak256(abi.encode(committee)), keccak256(abi.encode(expected)), "the spec's draw");
        assertEq(committee[0], pool[clientSlot + 1], "the probe stepped past the client");
        assertTrue(!escrow.isVerifier(jobId, client), "the client never sits on its job");

        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.drawCommittee(jobId);
    }

    /// Seeing the seed block's hash, the client finds that one more sybil in the pool would
    /// give it a majority of the committee (the pool's size is the draw's modulus). It joins
    /// the pool and draws in the same block: the seed only moves to that block, whose hash it
    /// could not know, and the draw then takes that hash; its choice bought nothing.
    function test_symptom1_changingThePoolAfterTheSeedOnlyMovesIt() public {
        _stakePuppet(PUPPET1_PK);
        address p1 = vm.addr(PUPPET1_PK);
        address p2 = vm.addr(PUPPET2_PK);
        uint256 jobId = _createUndrawn(BUDGET, 10_000, 400, 50);
        uint64 seedBlock = uint64(block.number);
        address[] memory now_ = _pool();
        address[] memory grown = new address[](now_.length + 1);
        for (uint256 i; i < now_.length; ++i) grown[i] = now_[i];
        grown[now_.length] = p2;
        // a seed hash for which joining would pay off
        bytes32 h;
        for (uint256 k;; ++k) {
            h = keccak256(abi.encode("grind the pool", k));
            uint256 asIs = _sybils(_expectedCommittee(h, jobId, now_, client, 3), p1, p2);
            uint256 withP2 = _sybils(_expectedCommittee(h, jobId, grown, client, 3), p1, p2);
            if (asIs <= 1 && withP2 >= 2) break;
        }
        vm.roll(seedBlock + 1);
        vm.setBlockhash(seedBlock, h);
        _stakePuppet(PUPPET2_PK);
        vm.expectEmit(address(escrow));
        emit JobEscrow.CommitteeSeedMoved(jobId, seedBlock + 1);
        vm.prank(client);
        escrow.drawCommittee(jobId);
        assertEq(uint256(escrow.getJob(jobId).status), uint256(JobEscrow.Status.Drawing), "no committee from h");

        vm.roll(seedBlock + 2);
        bytes32 next = blockhash(seedBlock + 1);
        escrow.drawCommittee(jobId);
        address[] memory c = escrow.getJob(jobId).committee;
        assertEq(
            keccak256(abi.encode(c)),
            keccak256(abi.encode(_expectedCommittee(next, jobId, _pool(), client, 3))),
            "the draw of a hash the client could not know"
        );
    }

    function _sybils(address[] memory c, address a, address b) internal pure returns (uint256 n) {
        for (uint256 i; i < c.length; ++i) {
            if (c[i] == a || c[i] == b) ++n;
        }
    }

    /// One sybil on a committee of three cannot even reach a quorum: its reject is refused,
    /// the honest members accept, and the provider is paid every accepted step.
    function test_symptom1_oneSybilCannotReject() public {
        _leavePool(v3);
        _stakePuppet(PUPPET1_PK);
        uint256 attackerStart = _attackerWealth();
        uint256 providerStart = usdc.balanceOf(provider);
        uint256 jobId = _defaultJob(); // committee: v1, v2 and the sybil, in some order
        assertTrue(escrow.isVerifier(jobId, vm.addr(PUPPET1_PK)), "the sybil was drawn");
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);

        uint256[] memory one = new uint256[](1);
        one[0] = PUPPET1_PK;
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), false, one);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 1, 2));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        _accept(jobId, 50, _ckpt(50));

        _clientExits(jobId);
        _puppetsWithdraw();
        assertEq(_bonded(provider), MIN_STAKE, "provider: stake whole");
        assertEq(escrow.burned(), 0, "nothing burned");
        vm.prank(provider);
        escrow.withdraw(token);
        assertEq(usdc.balanceOf(provider), providerStart - MIN_STAKE + 50 * 1000, "provider: paid every accepted step");
        // the client paid the accepted steps and the honest members' fees, nothing else
        assertEq(_attackerWealth(), attackerStart - 50 * 1000 - 2 * FEE, "attacker: no gain");
    }

    /// Even a sybil majority cannot slash: its reject ends the epoch, but one honest member
    /// did not sign, so slashed is 0, nothing is burned, and the provider's stake is exactly
    /// what it bonded. The fees the sybils earn are the client's own budget.
    function test_symptom1_sybilMajorityCannotSlash() public {
        _leavePool(v2);
        _leavePool(v3);
        _stakePuppet(PUPPET1_PK);
        _stakePuppet(PUPPET2_PK);
        uint256 attackerStart = _attackerWealth();
        uint256 providerStart = usdc.balanceOf(provider);
        uint256 jobId = _defaultJob(); // committee: v1 and two sybils
        assertTrue(escrow.isVerifier(jobId, v1), "one honest member");
        _register(provider, 2 * MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);

        // the client repeats as often as the provider bids again
        for (uint64 e = 1; e <= 2; ++e) {
            uint64 epoch = _currentEpoch(jobId);
            bytes32 honest = _ckpt(50);
            bytes[] memory sigs = _votes(jobId, epoch, 50, honest, false, _pks(PUPPET1_PK, PUPPET2_PK));
            vm.recordLogs();
            escrow.rejectCheckpoint(jobId, epoch, 50, honest, sigs);
            Vm.Log[] memory logs = vm.getRecordedLogs();
            assertEq(logs.length, 2, "CheckpointRejected and EpochEnded: no Slashed");
            (,, uint256 slashed,,) = abi.decode(logs[0].data, (uint64, bytes32, uint256, uint256, uint256));
            assertEq(slashed, 0, "slashed 0");
            if (e == 1) _assign(jobId, PROVIDER_PK, 1000);
        }
        assertEq(_bonded(provider), 2 * MIN_STAKE, "provider: stake exactly as bonded");
        assertEq(escrow.burned(), 0, "nothing burned");
        assertEq(_live(provider), 0, "no epoch held");

        _clientExits(jobId);
        _puppetsWithdraw();
        vm.startPrank(provider);
        escrow.requestUnbond(2 * MIN_STAKE);
        vm.warp(block.timestamp + UNBOND_DELAY);
        escrow.withdrawStake();
        vm.stopPrank();
        assertEq(usdc.balanceOf(provider), providerStart, "provider: every unit of stake back");
        assertEq(_attackerWealth(), attackerStart, "attacker: no gain, its fees were its own budget");
        assertEq(escrow.withdrawable(v1, token), 0, "the honest member signed nothing and earned nothing");
    }

    /// With a pool made only of the client's sybils (the honest verifiers left it), a
    /// unanimous reject can burn minStake, but nobody gains: the client and its sybils end with
    /// exactly what they started with, the slash is burned, and the provider loses exactly
    /// minStake, no more.
    function test_symptom1_fullyCapturedCommitteeGainsNothing() public {
        _leavePool(v1);
        _leavePool(v2);
        _leavePool(v3);
        _stakePuppet(PUPPET1_PK);
        _stakePuppet(PUPPET2_PK);
        _stakePuppet(PUPPET3_PK);
        uint256 attackerStart = _attackerWealth();
        uint256 providerStart = usdc.balanceOf(provider);
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);

        _reject(jobId, 50, _pks(PUPPET1_PK, PUPPET2_PK, PUPPET3_PK));
        assertEq(escrow.withdrawable(client, token), 0, "the reject credits the client nothing");
        assertEq(escrow.burned(), MIN_STAKE, "the slash is burned");

        _clientExits(jobId);
        _puppetsWithdraw();
        assertEq(_attackerWealth(), attackerStart, "attacker: exactly what it had");
        assertEq(_bonded(provider), 0, "provider: exactly minStake slashed");
        assertEq(usdc.balanceOf(provider), providerStart - MIN_STAKE, "provider lost exactly minStake");
    }

    /// Rejecting costs the provider at most minStake per epoch the client opened, and each
    /// epoch needs a bid the provider signed for it: a well-staked provider that bid twice
    /// to a fully captured committee loses exactly 2 × minStake and keeps the rest.
    function test_symptom1_slashAtMostMinStakePerEpochOpened() public {
        _leavePool(v1);
        _leavePool(v2);
        _leavePool(v3);
        _stakePuppet(PUPPET1_PK);
        _stakePuppet(PUPPET2_PK);
        _stakePuppet(PUPPET3_PK);
        uint256 attackerStart = _attackerWealth();
        uint256 jobId = _defaultJob();
        _register(provider, 3 * MIN_STAKE);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory bid1 = _bidSig(PROVIDER_PK, jobId, 1, 1000, expiry);
        bytes memory bid2 = _bidSig(PROVIDER_PK, jobId, 2, 1000, expiry);
        uint256[] memory all = _pks(PUPPET1_PK, PUPPET2_PK, PUPPET3_PK);

        vm.prank(client);
        escrow.assign(jobId, provider, 1000, expiry, bid1);
        bytes[] memory again = _votes(jobId, 1, 100, _ckpt(100), false, all);
        _reject(jobId, 50, all);
        // the epoch is over: no second slash for it
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.rejectCheckpoint(jobId, 1, 100, _ckpt(100), again);

        vm.prank(client);
        escrow.assign(jobId, provider, 1000, expiry, bid2);
        // nor does epoch 1's decision carry into epoch 2
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongEpoch.selector, 1, 2));
        escrow.rejectCheckpoint(jobId, 1, 100, _ckpt(100), again);
        _reject(jobId, 50, all);

        // no third epoch without a third bid
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 1000, expiry, bid2);

        assertEq(_bonded(provider), MIN_STAKE, "provider: exactly 3 - 2 minStake left");
        assertEq(escrow.burned(), 2 * MIN_STAKE, "two epochs, two slashes, burned");
        _clientExits(jobId);
        _puppetsWithdraw();
        assertEq(_attackerWealth(), attackerStart, "attacker: exactly what it had");
    }

    // ------------------------------------------ symptom 2: stake held hostage

    /// A job cannot lock stake and budget for longer than maxDuration + maxGrace.
    function test_symptom2_deadlineAndGraceBeyondMaximaRefused() public {
        uint64 latest = uint64(block.timestamp) + MAX_DURATION;
        vm.startPrank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.DeadlineTooFar.selector, latest + 1, uint256(latest)));
        escrow.createJob(token, BUDGET, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, latest + 1, GRACE);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.GraceTooLong.selector, MAX_GRACE + 1, MAX_GRACE));
        escrow.createJob(token, BUDGET, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, latest, MAX_GRACE + 1);
        // the longest job allowed: after its deadline + grace anyone ends it
        uint256 jobId = escrow.createJob(token, BUDGET, 10_000, 400, 50, keccak256("spec"), 3, 2, FEE, latest, MAX_GRACE);
        vm.stopPrank();
        _draw(jobId);
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        vm.warp(uint256(latest) + MAX_GRACE);
        vm.prank(provider);
        escrow.expire(jobId);
        assertEq(_live(provider), 0, "released at the latest after maxDuration + maxGrace");
        vm.prank(provider);
        escrow.requestUnbond(MIN_STAKE);
    }

    /// A client that assigns a provider and never decides cannot keep its stake: the provider
    /// resigns (no slash), unbonds everything and, after the delay, has all of it back.
    function test_symptom2_liveProviderResignsAndWithdrawsAllStake() public {
        uint256 providerStart = usdc.balanceOf(provider);
        uint256 clientStart = usdc.balanceOf(client);
        uint256 jobId = _defaultJob();
        _register(provider, 2 * MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(provider);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, MIN_STAKE, 2 * MIN_STAKE));
        escrow.requestUnbond(2 * MIN_STAKE);

        vm.startPrank(provider);
        escrow.resign(jobId);
        escrow.requestUnbond(2 * MIN_STAKE);
        vm.warp(block.timestamp + UNBOND_DELAY);
        escrow.withdrawStake();
        vm.stopPrank();
        assertEq(usdc.balanceOf(provider), providerStart, "provider: every unit of stake back");
        (uint256 bonded, uint256 unbonding, uint64 at, uint32 live) = escrow.stakeOf(provider);
        assertEq(bonded + unbonding + at + live, 0, "nothing left behind");
        assertEq(escrow.burned(), 0, "no slash");
        assertEq(escrow.withdrawable(client, token), 0, "the client gained nothing");
        assertEq(escrow.getJob(jobId).remaining, BUDGET, "and lost nothing");
        assertEq(usdc.balanceOf(client), clientStart - BUDGET, "its budget still in the job");
    }

    /// While live, a provider can still unbond and withdraw everything above its reservation.
    function test_symptom2_liveProviderUnbondsFreePart() public {
        uint256 providerStart = usdc.balanceOf(provider);
        uint256 jobId = _defaultJob();
        _register(provider, 3 * MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        vm.startPrank(provider);
        escrow.requestUnbond(2 * MIN_STAKE);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.StakeLocked.selector, 0, 1));
        escrow.requestUnbond(1);
        vm.warp(block.timestamp + UNBOND_DELAY);
        escrow.withdrawStake();
        vm.stopPrank();
        assertEq(usdc.balanceOf(provider), providerStart - MIN_STAKE, "provider: all but the reservation back");
        assertEq(_bonded(provider), MIN_STAKE, "the reservation backs the live epoch");
        assertEq(_live(provider), 1, "still live");
    }

    // ------------------------------------- symptom 4: one stake behind many epochs

    /// Stake for one epoch cannot back a second job, neither directly nor by unbonding the
    /// reserved part first.
    function test_symptom4_stakeForOneEpochCannotBackTwo() public {
        uint256 a = _defaultJob();
        uint256 b = _defaultJob();
        _register(provider, 2 * MIN_STAKE);
        _assign(a, PROVIDER_PK, 1000);
        vm.prank(provider);
        escrow.requestUnbond(MIN_STAKE);
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory bid = _bidSig(PROVIDER_PK, b, 1, 1000, expiry);
        vm.prank(client);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.InsufficientStake.selector, MIN_STAKE, 2 * MIN_STAKE));
        escrow.assign(b, provider, 1000, expiry, bid);
        assertEq(_live(provider), 1, "one epoch");
        assertTrue(_bonded(provider) >= uint256(_live(provider)) * MIN_STAKE, "reservation holds");
        assertEq(uint256(escrow.getJob(b).status), uint256(JobEscrow.Status.Open), "job b unassigned");
    }

    /// With the reservation, every reject slashes exactly minStake: the last of several
    /// concurrent epochs is never short.
    function test_symptom4_everyRejectSlashesExactlyMinStake() public {
        uint256[3] memory jobs = [_defaultJob(), _defaultJob(), _defaultJob()];
        _register(provider, 3 * MIN_STAKE);
        for (uint256 i; i < 3; ++i) {
            _assign(jobs[i], PROVIDER_PK, 1000);
        }
        for (uint256 i; i < 3; ++i) {
            uint256 before = _bonded(provider);
            escrow.rejectCheckpoint(jobs[i], 1, 50, keccak256("junk"), _allVotes(jobs[i], 1, 50, keccak256("junk"), false));
            assertEq(before - _bonded(provider), MIN_STAKE, "slashed exactly minStake");
            assertTrue(_bonded(provider) >= uint256(_live(provider)) * MIN_STAKE, "reservation holds");
        }
        assertEq(escrow.burned(), 3 * MIN_STAKE, "all burned");
        assertEq(escrow.withdrawable(client, token), 0, "the client got nothing");
    }

    // ------------------------------------- symptom 6: a bid used on other terms

    /// A bid the provider signed over terms it was shown (here: the same job with a
    /// committee of the client's sybils, as a dishonest node could show it) is refused for the
    /// job that is on chain, with the same id, epoch, provider, price and expiry: the provider
    /// is not assigned and nothing of its changes.
    function test_symptom6_bidOverOtherTermsRefused() public {
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        uint64 expiry = uint64(block.timestamp) + 600;
        TermsInput memory shown = _defaultTerms(jobId);
        assertEq(_expectedTerms(shown), escrow.termsOf(jobId), "the real terms, recomputed");
        shown.committee = _puppets();
        bytes32 read = _expectedTerms(shown);
        assertTrue(read != escrow.termsOf(jobId), "other terms");
        bytes memory bid = _bidSigOver(PROVIDER_PK, jobId, read, 1, 1000, expiry);
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(jobId, provider, 1000, expiry, bid);
        assertEq(_live(provider), 0, "not assigned");
        assertEq(_bonded(provider), MIN_STAKE, "stake untouched");
    }

    /// The same, with job 1 itself re-created under other terms (as after a reorg): the pool
    /// is the client's sybils now, so the committee differs. The bid the provider signed for
    /// the job it saw does not assign it to the job that is there.
    function test_symptom6_sameJobIdRecreatedWithOtherTermsRefusesTheBid() public {
        _register(provider, MIN_STAKE);
        uint64 expiry = uint64(block.timestamp) + 600;
        uint256 before = vm.snapshotState();
        uint256 seen = _defaultJob();
        bytes memory bid = _bidSig(PROVIDER_PK, seen, 1, 1000, expiry);
        bytes32 seenTerms = escrow.termsOf(seen);

        vm.revertToState(before);
        _leavePool(v1);
        _leavePool(v2);
        _leavePool(v3);
        _stakePuppet(PUPPET1_PK);
        _stakePuppet(PUPPET2_PK);
        _stakePuppet(PUPPET3_PK);
        uint256 actual = _defaultJob();
        assertEq(actual, seen, "the same job id");
        assertTrue(escrow.termsOf(actual) != seenTerms, "other terms");
        vm.prank(client);
        vm.expectPartialRevert(JobEscrow.WrongSigner.selector);
        escrow.assign(actual, provider, 1000, expiry, bid);
        assertEq(_live(provider), 0, "not assigned");
        assertEq(_bonded(provider), MIN_STAKE, "stake untouched");
    }

    // ------------------------------- symptom 3: ending the epoch to void an accept

    /// The client sees the accept of step 100 coming and ends the epoch first, by a release or
    /// by a replacement: the votes still land within the window, and the provider is paid
    /// exactly every step its verifiers accepted, at its price. The client gains nothing: its
    /// refund is the budget less exactly those steps and their fees.
    function test_symptom3_releaseBeforeAcceptStillPays() public {
        uint256 clientStart = usdc.balanceOf(client);
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        _accept(jobId, 50, _ckpt(50));
        bytes[] memory coming = _quorumVotes(jobId, 1, 100, _ckpt(100), true);

        vm.prank(client);
        escrow.releaseProvider(jobId);
        escrow.acceptCheckpoint(jobId, 1, 100, _ckpt(100), coming);

        assertEq(escrow.withdrawable(provider, token), 100 * 1000, "both accepted intervals paid");
        assertEq(_bonded(provider), MIN_STAKE, "stake intact");
        _clientExits(jobId);
        assertEq(
            usdc.balanceOf(client), clientStart - 100 * 1000 - 4 * FEE, "client: budget less the accepted steps and fees"
        );
    }

    function test_symptom3_replaceBeforeAcceptStillPays() public {
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        bytes[] memory coming = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        _assign(jobId, PROVIDER2_PK, 500); // the client's puppet provider, cheaper

        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), coming);
        assertEq(escrow.withdrawable(provider, token), 50 * 1000, "paid at its own price");
        // and the replacement cannot be paid for the same steps again
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        assertEq(uint256(j.status), uint256(JobEscrow.Status.Open), "the replacement was superseded");
        assertEq(j.lastAcceptedStep, 50, "head at the paid step");
    }

    /// Chaining ends cannot shake the record off: ending the replacement epoch too (or a third
    /// one) leaves epoch 1's record standing, because each epoch has its own.
    function test_symptom3_chainedReplacementsKeepTheRecord() public {
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _register(provider2, 2 * MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        bytes[] memory coming = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        _assign(jobId, PROVIDER2_PK, 1000);
        _assign(jobId, PROVIDER2_PK, 1000);
        vm.prank(client);
        escrow.releaseProvider(jobId);

        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), coming);
        assertEq(escrow.withdrawable(provider, token), 50 * 1000, "epoch 1 paid");
        assertEq(escrow.withdrawable(provider2, token), 0, "nothing to the others");
    }

    /// The window does not open a door for the fenced provider: nothing after the next
    /// checkpoint, nothing after the window.
    function test_symptom3_fencedProviderPaidNoMore() public {
        uint256 jobId = _defaultJob();
        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        vm.prank(client);
        escrow.releaseProvider(jobId);
        bytes[] memory later = _quorumVotes(jobId, 1, 150, _ckpt(150), true);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.BeyondNextCheckpoint.selector, 150));
        escrow.acceptCheckpoint(jobId, 1, 150, _ckpt(150), later);
        vm.warp(block.timestamp + DECISION_WINDOW + 1);
        bytes[] memory next = _quorumVotes(jobId, 1, 50, _ckpt(50), true);
        vm.expectPartialRevert(JobEscrow.WindowClosed.selector);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), next);
        assertEq(escrow.withdrawable(provider, token), 0, "nothing paid");
    }

    // ------------------------------- symptom 7: verifiers named by the client, unpaid

    /// The committee is drawn from the staked pool by the escrow (exactly the spec's draw over
    /// the seed block's hash, computed here), and its members are paid from the budget: each
    /// signer of a decision earns the fee, a member that is silent or votes against earns
    /// nothing, and the events record who signed. paid + fees + refund == budget, to the unit.
    function test_symptom7_verifiersDrawnNotNamedAndPaid() public {
        _stakeVerifier(vm.addr(0xB4), MIN_VERIFIER_STAKE);
        _stakeVerifier(vm.addr(0xB5), MIN_VERIFIER_STAKE);
        address[] memory pool = _pool();
        uint256 clientStart = usdc.balanceOf(client);

        uint256 jobId = _createUndrawn(BUDGET, 10_000, 400, 50);
        vm.roll(block.number + 1);
        escrow.drawCommittee(jobId);
        address[] memory c = escrow.getJob(jobId).committee;
        address[] memory expected =
            _expectedCommittee(blockhash(escrow.getJob(jobId).seedBlock), jobId, pool, client, 3);
        assertEq(keccak256(abi.encode(c)), keccak256(abi.encode(expected)), "drawn, not named");

        _register(provider, MIN_STAKE);
        _assign(jobId, PROVIDER_PK, 1000);
        _decideWithDrawnCommittee(jobId, c);
        escrow.settle(jobId);

        assertEq(escrow.withdrawable(c[0], token), 2 * FEE, "c0 signed both decisions");
        assertEq(escrow.withdrawable(c[1], token), FEE, "c1: one fee, none for its silence");
        assertEq(escrow.withdrawable(c[2], token), FEE, "c2: one fee, none for voting against");
        for (uint256 k; k < pool.length; ++k) {
            if (!escrow.isVerifier(jobId, pool[k])) assertEq(escrow.withdrawable(pool[k], token), 0, "not drawn, not paid");
        }
        uint256 paid = escrow.withdrawable(provider, token);
        uint256 refund = escrow.withdrawable(client, token);
        assertEq(paid, 400 * 1000, "every step paid once");
        assertEq(paid + 4 * FEE + refund, BUDGET, "paid + fees + refund == budget");
        vm.prank(client);
        escrow.withdraw(token);
        assertEq(usdc.balanceOf(client), clientStart - paid - 4 * FEE, "the client paid the work and the fees, no more");
    }

    function _keyOf(address who) internal view returns (uint256) {
        uint256[5] memory pks = [V1_PK, V2_PK, V3_PK, uint256(0xB4), uint256(0xB5)];
        for (uint256 k; k < 5; ++k) {
            if (vm.addr(pks[k]) == who) return pks[k];
        }
        revert("no key");
    }

    /// @dev Step 50: c0 and c1 accept, c2 votes against (its reject cannot land alone).
    ///      Step 400: c2 and c0 accept, c1 is silent.
    function _decideWithDrawnCommittee(uint256 jobId, address[] memory c) internal {
        uint256[] memory one = new uint256[](1);
        one[0] = _keyOf(c[2]);
        bytes[] memory against = _votes(jobId, 1, 50, _ckpt(50), false, one);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.QuorumNotReached.selector, 1, 2));
        escrow.rejectCheckpoint(jobId, 1, 50, _ckpt(50), against);
        bytes[] memory sigs = _votes(jobId, 1, 50, _ckpt(50), true, _pks(_keyOf(c[0]), _keyOf(c[1])));
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 50, _ckpt(50), provider, 50 * 1000, 0x3, 2 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 50, _ckpt(50), sigs);
        sigs = _votes(jobId, 1, 400, _ckpt(400), true, _pks(_keyOf(c[2]), _keyOf(c[0])));
        vm.expectEmit(address(escrow));
        emit JobEscrow.CheckpointAccepted(jobId, 1, 400, _ckpt(400), provider, 350 * 1000, 0x5, 2 * FEE);
        escrow.acceptCheckpoint(jobId, 1, 400, _ckpt(400), sigs);
    }

    /// The client cannot pick who gets paid by re-rolling the draw: there is no cancel while
    /// drawing, a second draw is refused, and the only way out before the deadline is to
    /// leave its budget locked until deadline + grace.
    function test_symptom7_noRerollOfTheDraw() public {
        uint256 jobId = _createUndrawn(BUDGET, 10_000, 400, 50);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.SeedNotMined.selector, uint64(block.number)));
        escrow.drawCommittee(jobId);
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.TooEarly.selector, uint256(j.deadline) + j.grace));
        escrow.expire(jobId);
        _draw(jobId);
        address[] memory first = escrow.getJob(jobId).committee;
        vm.roll(block.number + 1);
        vm.expectRevert(abi.encodeWithSelector(JobEscrow.WrongStatus.selector, JobEscrow.Status.Open));
        escrow.drawCommittee(jobId);
        assertEq(keccak256(abi.encode(escrow.getJob(jobId).committee)), keccak256(abi.encode(first)), "fixed");
    }
}
