// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Base, Vm} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {TestUSDC} from "../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev Drives the escrow through random sequences of real calls by keyed actors and keeps
///      ghost books of what should have happened. Calls that the escrow refuses are simply
///      refused (fail_on_revert is off); whenever the escrow's result differs from the ghost
///      books the handler records a mismatch, which the invariants report.
contract EscrowHandler is Base {
    JobEscrow public immutable escrow;
    TestUSDC public immutable usdc;
    IERC20 internal immutable token;

    uint256[3] internal clientPks = [uint256(0xC1), 0xC2, 0xC3];
    uint256[4] internal providerPks = [uint256(0xA1), 0xA2, 0xA3, 0xA4];
    uint256[3] internal verifierPks = [uint256(0xB1), 0xB2, 0xB3];

    uint256 public constant MAX_JOBS = 20;

    // ghost books, per job
    mapping(uint256 => uint256) public ghostDeposited;
    mapping(uint256 => uint256) public ghostPaid;
    mapping(uint256 => uint256) public ghostRefunded;
    mapping(uint256 => uint256) public ghostExits;
    mapping(uint256 => bytes32) public finishedSnapshot;
    // ghost books, global
    uint256 public ghostStakes;
    uint256 public ghostSlashed;
    uint256 public ghostWithdrawn;
    uint256 public ghostDepositsIn;
    uint256 public mismatches;
    string public lastMismatch;

    mapping(bytes32 => uint256) public calls;
    uint256 public actionsTried;

    modifier action() {
        actionsTried++;
        _;
    }
    // successful calls by action name: shows that the runs reach every path

    constructor(JobEscrow escrow_, TestUSDC usdc_) {
        escrow = escrow_;
        usdc = usdc_;
        token = IERC20(address(usdc_));
        for (uint256 i; i < clientPks.length; ++i) _fund(vm.addr(clientPks[i]));
        for (uint256 i; i < providerPks.length; ++i) _fund(vm.addr(providerPks[i]));
    }

    function _fund(address who) internal {
        usdc.mint(who, 1e30);
        vm.prank(who);
        usdc.approve(address(escrow), type(uint256).max);
    }

    function _mismatch(string memory what) internal {
        mismatches += 1;
        lastMismatch = what;
    }

    function _job(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        if (n == 0) return (0, false);
        return (bound(seed, 1, n), true);
    }

    /// @dev From the seed on, the first job that has a live epoch, so that accept and
    ///      reject calls mostly reach the escrow's success paths.
    function _liveJob(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        for (uint256 k; k < n; ++k) {
            uint256 id = (seed % n + k) % n + 1;
            if (escrow.getJob(id).status == JobEscrow.Status.Assigned) return (id, true);
        }
        return (0, false);
    }

    function actors() external view returns (address[] memory all) {
        all = new address[](clientPks.length + providerPks.length);
        for (uint256 i; i < clientPks.length; ++i) all[i] = vm.addr(clientPks[i]);
        for (uint256 i; i < providerPks.length; ++i) all[clientPks.length + i] = vm.addr(providerPks[i]);
    }

    function providers() external view returns (address[] memory all) {
        all = new address[](providerPks.length);
        for (uint256 i; i < providerPks.length; ++i) all[i] = vm.addr(providerPks[i]);
    }

    // ------------------------------------------------------------- actions

    function createJob(uint256 clientSeed, uint256 maxPrice, uint64 total, uint64 interval, uint256 slack, uint8 quorum, uint64 life)
        external
    action {
        if (escrow.jobCount() >= MAX_JOBS) return;
        address client = vm.addr(clientPks[bound(clientSeed, 0, clientPks.length - 1)]);
        total = uint64(bound(total, 1, 1000));
        // several checkpoints per job, so that runs reach replacements and completions
        interval = uint64(bound(interval, 1, total / 5 + 1));
        maxPrice = bound(maxPrice, 1, 1e12);
        uint256 budget = maxPrice * total + bound(slack, 0, 1e15);
        address[] memory vs = new address[](verifierPks.length);
        for (uint256 i; i < vs.length; ++i) vs[i] = vm.addr(verifierPks[i]);
        quorum = uint8(bound(quorum, 1, vs.length));
        uint64 deadline = uint64(block.timestamp + bound(life, 1 hours, 3 days));
        vm.prank(client);
        uint256 jobId = escrow.createJob(token, budget, maxPrice, total, interval, keccak256(abi.encode(life)), vs, quorum, deadline, 1 hours);
        ghostDeposited[jobId] = budget;
        ghostDepositsIn += budget;
        calls["createJob"]++;
    }

    function register(uint256 providerSeed, uint256 amount) external action {
        address p = vm.addr(providerPks[bound(providerSeed, 0, providerPks.length - 1)]);
        // mostly enough to be assigned, sometimes not
        amount = bound(amount, escrow.minStake() / 4, 2 * escrow.minStake());
        vm.prank(p);
        try escrow.register(amount) {
            ghostStakes += amount;
            ghostDepositsIn += amount;
            calls["register"]++;
        } catch {}
    }

    function requestUnbond(uint256 providerSeed) external action {
        address p = vm.addr(providerPks[bound(providerSeed, 0, providerPks.length - 1)]);
        (,, uint32 live) = escrow.stakeOf(p);
        vm.prank(p);
        try escrow.requestUnbond() {
            if (live != 0) _mismatch("unbond with a live epoch");
            calls["requestUnbond"]++;
        } catch {}
    }

    function withdrawStake(uint256 providerSeed) external action {
        address p = vm.addr(providerPks[bound(providerSeed, 0, providerPks.length - 1)]);
        (uint256 amount,,) = escrow.stakeOf(p);
        uint256 before = usdc.balanceOf(p);
        vm.prank(p);
        try escrow.withdrawStake() {
            if (usdc.balanceOf(p) - before != amount) _mismatch("stake paid out");
            ghostStakes -= amount;
            ghostWithdrawn += amount;
            calls["withdrawStake"]++;
        } catch {}
    }

    function assign(uint256 jobSeed, uint256 providerSeed, uint256 price) external action {
        (uint256 jobId, bool ok) = _assignableJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        uint256 pk = _eligibleProvider(providerSeed);
        price = bound(price, 1, j.maxPricePerStep);
        uint64 expiry = uint64(block.timestamp + 60);
        bytes memory sig = signDigest(pk, escrow.hashBid(jobId, j.epoch + 1, vm.addr(pk), price, expiry));
        vm.prank(j.client);
        try escrow.assign(jobId, vm.addr(pk), price, expiry, sig) {
            if (j.status != JobEscrow.Status.Open && j.status != JobEscrow.Status.Assigned) {
                _mismatch("assigned a finished job");
            }
            calls["assign"]++;
        } catch {}
    }

    /// @dev From the seed on, the first job still open to assignment (or the seed's job).
    function _assignableJob(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        if (n == 0) return (0, false);
        for (uint256 k; k < n; ++k) {
            uint256 id = (seed % n + k) % n + 1;
            JobEscrow.JobView memory j = escrow.getJob(id);
            bool open = j.status == JobEscrow.Status.Open || j.status == JobEscrow.Status.Assigned;
            if (open && block.timestamp < j.deadline) return (id, true);
        }
        return (seed % n + 1, true);
    }

    /// @dev From the seed on, the first provider with enough bonded stake (or the seed's one).
    function _eligibleProvider(uint256 seed) internal view returns (uint256 pk) {
        uint256 n = providerPks.length;
        for (uint256 k; k < n; ++k) {
            pk = providerPks[(seed % n + k) % n];
            (uint256 amount, uint64 unbondAt,) = escrow.stakeOf(vm.addr(pk));
            if (unbondAt == 0 && amount >= escrow.minStake()) return pk;
        }
        return providerPks[seed % n];
    }

    function releaseProvider(uint256 jobSeed) external action {
        (uint256 jobId, bool ok) = _liveJob(jobSeed);
        if (!ok) return;
        vm.prank(escrow.getJob(jobId).client);
        try escrow.releaseProvider(jobId) {
            calls["releaseProvider"]++;
        } catch {}
    }

    function acceptCheckpoint(uint256 jobSeed, uint64 intervals, uint256 signerSeed) external action {
        (uint256 jobId, bool ok) = _liveJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        uint64 step = j.lastAcceptedStep + j.checkpointInterval * uint64(bound(intervals, 1, 2));
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps) step = j.totalSteps;
        bytes32 hash = keccak256(abi.encode(jobId, j.epoch, step));
        bytes[] memory sigs = _votes(jobId, j.epoch, step, hash, true, j.quorum, signerSeed);

        uint256 providerBefore = escrow.withdrawable(j.provider, token);
        uint256 clientBefore = escrow.withdrawable(j.client, token);
        try escrow.acceptCheckpoint(jobId, j.epoch, step, hash, sigs) {
            if (j.status != JobEscrow.Status.Assigned) _mismatch("paid a job with no live epoch");
            uint256 amount = uint256(step - j.lastAcceptedStep) * j.pricePerStep;
            ghostPaid[jobId] += amount;
            bool sameAccount = j.provider == j.client;
            uint256 refund = step == j.totalSteps ? j.remaining - amount : 0;
            if (step == j.totalSteps) {
                ghostRefunded[jobId] += refund;
                _finish(jobId);
            }
            if (sameAccount) {
                if (escrow.withdrawable(j.provider, token) - providerBefore != amount + refund) _mismatch("credit");
            } else {
                if (escrow.withdrawable(j.provider, token) - providerBefore != amount) _mismatch("provider credit");
                if (escrow.withdrawable(j.client, token) - clientBefore != refund) _mismatch("refund credit");
            }
            calls["acceptCheckpoint"]++;
        } catch {}
    }

    function rejectCheckpoint(uint256 jobSeed, uint256 signerSeed) external action {
        (uint256 jobId, bool ok) = _liveJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        uint64 step = j.lastAcceptedStep + j.checkpointInterval;
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps) step = j.totalSteps;
        bytes32 hash = keccak256("junk");
        bytes[] memory sigs = _votes(jobId, j.epoch, step, hash, false, j.quorum, signerSeed);
        (uint256 stakeBefore,,) = escrow.stakeOf(j.provider);
        try escrow.rejectCheckpoint(jobId, j.epoch, step, hash, sigs) {
            (uint256 stakeAfter,,) = escrow.stakeOf(j.provider);
            uint256 slashed = stakeBefore - stakeAfter;
            uint256 expected = stakeBefore < escrow.minStake() ? stakeBefore : escrow.minStake();
            if (slashed != expected) _mismatch("slash amount");
            ghostStakes -= slashed;
            ghostSlashed += slashed;
            calls["rejectCheckpoint"]++;
        } catch {}
    }

    function expire(uint256 jobSeed) external action {
        (uint256 jobId, bool ok) = _job(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        try escrow.expire(jobId) {
            if (block.timestamp < uint256(j.deadline) + j.grace) _mismatch("expired early");
            ghostRefunded[jobId] += j.remaining;
            _finish(jobId);
            calls["expire"]++;
        } catch {}
    }

    function withdraw(uint256 actorSeed) external action {
        address[] memory all = this.actors();
        address who = all[bound(actorSeed, 0, all.length - 1)];
        uint256 owed = escrow.withdrawable(who, token);
        uint256 before = usdc.balanceOf(who);
        vm.prank(who);
        try escrow.withdraw(token) {
            if (usdc.balanceOf(who) - before != owed) _mismatch("withdrawn amount");
            ghostWithdrawn += owed;
            calls["withdraw"]++;
        } catch {}
    }

    function warp(uint256 secondsAhead) external action {
        vm.warp(block.timestamp + bound(secondsAhead, 1, 2 hours));
        calls["warp"]++;
    }

    // ------------------------------------------------------------- helpers

    function _finish(uint256 jobId) internal {
        ghostExits[jobId] += 1;
        finishedSnapshot[jobId] = keccak256(abi.encode(escrow.getJob(jobId)));
    }

    /// @dev `quorum` votes from distinct verifiers, rotated by the seed.
    function _votes(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept, uint8 quorum, uint256 seed)
        internal
        view
        returns (bytes[] memory sigs)
    {
        bytes32 digest = escrow.hashVote(jobId, epoch, step, hash, accept);
        sigs = new bytes[](quorum);
        uint256 start = seed % verifierPks.length;
        for (uint256 i; i < quorum; ++i) {
            sigs[i] = signDigest(verifierPks[(start + i) % verifierPks.length], digest);
        }
    }
}

/// @dev Tries to exit a job and reports the outcome by reverting, so the probe leaves no trace.
contract ExitProbe is Base {
    error Outcome(bool expired, bool withdrawn);

    function probe(JobEscrow escrow, uint256 jobId) external {
        bool expired;
        bool withdrawn;
        try escrow.expire(jobId) {
            expired = true;
            JobEscrow.JobView memory j = escrow.getJob(jobId);
            if (escrow.withdrawable(j.client, IERC20(j.token)) != 0) {
                vm.prank(j.client);
                try escrow.withdraw(IERC20(j.token)) {
                    withdrawn = true;
                } catch {}
            } else {
                withdrawn = true;
            }
        } catch {}
        revert Outcome(expired, withdrawn);
    }
}

contract JobEscrowInvariantTest is Base {
    JobEscrow internal escrow;
    TestUSDC internal usdc;
    EscrowHandler internal handler;
    ExitProbe internal prober;

    function setUp() public {
        vm.warp(1_800_000_000);
        usdc = new TestUSDC();
        escrow = new JobEscrow(IERC20(address(usdc)), 100e6, 1 days);
        handler = new EscrowHandler(escrow, usdc);
        prober = new ExitProbe();
    }

    /// @dev forge finds this by name: only the handler is called at random.
    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    /// @dev One campaign checks every property after every call: on two cores, one
    ///      invariant function with more runs beats six with a sixth of them each.
    function invariant_escrow() public {
        uint256 n = escrow.jobCount();
        // jobs[id - 1]: read once per check round, every getJob is a large copy
        JobEscrow.JobView[] memory jobs = new JobEscrow.JobView[](n);
        for (uint256 id = 1; id <= n; ++id) {
            jobs[id - 1] = escrow.getJob(id);
        }
        assertEq(handler.mismatches(), 0, handler.lastMismatch());
        _checkSolvent(jobs);
        _checkPerJob(jobs);
        _checkLiveEpochs(jobs);
        _checkPastDeadlineCanExit(jobs);
    }

    /// The escrow holds at least every obligation: budgets left, stakes and credits. With no
    /// other inflow it holds exactly that, and exactly deposits minus withdrawals.
    function _checkSolvent(JobEscrow.JobView[] memory jobs) internal view {
        uint256 obligations;
        for (uint256 i; i < jobs.length; ++i) {
            obligations += jobs[i].remaining;
        }
        address[] memory ps = handler.providers();
        uint256 stakes;
        for (uint256 i; i < ps.length; ++i) {
            (uint256 s,,) = escrow.stakeOf(ps[i]);
            stakes += s;
        }
        assertEq(stakes, handler.ghostStakes(), "stakes match the ghost book");
        obligations += stakes;
        address[] memory all = handler.actors();
        for (uint256 i; i < all.length; ++i) {
            obligations += escrow.withdrawable(all[i], IERC20(address(usdc)));
        }
        uint256 held = usdc.balanceOf(address(escrow));
        assertTrue(held >= obligations, "escrow below its obligations");
        assertEq(held, obligations, "no funds unaccounted for");
        assertEq(held, handler.ghostDepositsIn() - handler.ghostWithdrawn(), "deposits - withdrawals");
    }

    /// Per job: paid + refunded + remaining == deposited; a job exits at most once, and a
    /// finished job never changes again.
    function _checkPerJob(JobEscrow.JobView[] memory jobs) internal view {
        for (uint256 i; i < jobs.length; ++i) {
            uint256 id = i + 1;
            JobEscrow.JobView memory j = jobs[i];
            assertEq(j.deposit, handler.ghostDeposited(id), "deposit");
            assertEq(handler.ghostPaid(id) + handler.ghostRefunded(id) + j.remaining, j.deposit, "conservation");
            assertTrue(handler.ghostExits(id) <= 1, "job exited twice");
            bool finished = j.status == JobEscrow.Status.Completed || j.status == JobEscrow.Status.Expired;
            assertEq(handler.ghostExits(id), finished ? 1 : 0, "exit recorded iff finished");
            if (finished) {
                assertEq(j.remaining, 0, "finished job keeps nothing");
                assertEq(keccak256(abi.encode(j)), handler.finishedSnapshot(id), "finished job changed");
            } else {
                assertEq(handler.ghostRefunded(id), 0, "refund before finishing");
            }
            assertTrue(j.lastAcceptedStep <= j.totalSteps, "step bound");
        }
    }

    /// Live epochs counted per provider equal the jobs they hold.
    function _checkLiveEpochs(JobEscrow.JobView[] memory jobs) internal view {
        address[] memory ps = handler.providers();
        for (uint256 p; p < ps.length; ++p) {
            uint256 held;
            for (uint256 i; i < jobs.length; ++i) {
                if (jobs[i].status == JobEscrow.Status.Assigned && jobs[i].provider == ps[p]) held++;
            }
            (,, uint32 live) = escrow.stakeOf(ps[p]);
            assertEq(live, held, "live epochs");
        }
    }

    /// Any job past deadline + grace that has not finished can be expired, and its client paid.
    function _checkPastDeadlineCanExit(JobEscrow.JobView[] memory jobs) internal {
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            bool live = j.status == JobEscrow.Status.Open || j.status == JobEscrow.Status.Assigned;
            if (!live || block.timestamp < uint256(j.deadline) + j.grace) continue;
            try prober.probe(escrow, i + 1) {
                assertTrue(false, "probe returned");
            } catch (bytes memory reason) {
                assertEq(reason, abi.encodeWithSelector(ExitProbe.Outcome.selector, true, true), "job cannot exit");
            }
        }
    }
}
