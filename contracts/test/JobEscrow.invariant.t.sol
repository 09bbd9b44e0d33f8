// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Base} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {TestUSDC} from "../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev Drives the escrow through random sequences of real calls by keyed actors and keeps
///      ghost books of what should have happened: every provider's bonded and unbonding
///      stake, every account's credits per token, what went in and out per token, what was
///      burned. Calls that the escrow refuses are simply refused (fail_on_revert is off);
///      whenever the escrow's decision or result differs from the rules the handler records a
///      mismatch, which the invariants report. Jobs are paid in the stake token or in a
///      second token, so both forms of the conservation equation are exercised.
contract EscrowHandler is Base {
    JobEscrow public immutable escrow;
    TestUSDC public immutable usdc; // the stake token
    TestUSDC public immutable other; // a job token that is not the stake token

    uint256[3] internal clientPks = [uint256(0xC1), 0xC2, 0xC3];
    uint256[4] internal providerPks = [uint256(0xA1), 0xA2, 0xA3, 0xA4];
    uint256[3] internal verifierPks = [uint256(0xB1), 0xB2, 0xB3];

    uint256 public constant MAX_JOBS = 20;

    // ghost books, per job
    mapping(uint256 => uint256) public ghostDeposited;
    mapping(uint256 => uint256) public ghostPaid;
    mapping(uint256 => uint256) public ghostRefunded;
    mapping(uint256 => uint256) public ghostExits; // completions and expiries
    mapping(uint256 => uint256) public ghostSettles;
    mapping(uint256 => bytes32) public finishedSnapshot;
    // ghost books, per provider, account and token
    mapping(address => uint256) public ghostBonded;
    mapping(address => uint256) public ghostUnbonding;
    mapping(address account => mapping(address token => uint256)) public ghostCredits;
    mapping(address token => uint256) public ghostIn;
    mapping(address token => uint256) public ghostOut;
    // ghost books, global
    uint256 public ghostBurned; // Σ slashes
    uint256 public ghostSlashes; // how many
    uint256 public mismatches;
    string public lastMismatch;

    // successful calls by action name: shows that the runs reach every path
    mapping(bytes32 => uint256) public calls;

    constructor(JobEscrow escrow_, TestUSDC usdc_, TestUSDC other_) {
        escrow = escrow_;
        usdc = usdc_;
        other = other_;
        for (uint256 i; i < clientPks.length; ++i) {
            _fund(usdc, vm.addr(clientPks[i]));
            _fund(other, vm.addr(clientPks[i]));
        }
        for (uint256 i; i < providerPks.length; ++i) _fund(usdc, vm.addr(providerPks[i]));
    }

    function _fund(TestUSDC t, address who) internal {
        t.mint(who, 1e30);
        vm.prank(who);
        t.approve(address(escrow), type(uint256).max);
    }

    function _mismatch(string memory what) internal {
        mismatches += 1;
        lastMismatch = what;
    }

    function _minStake() internal view returns (uint256) {
        return escrow.minStake();
    }

    function _provider(uint256 seed) internal view returns (address) {
        return vm.addr(providerPks[bound(seed, 0, providerPks.length - 1)]);
    }

    function _job(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        if (n == 0) return (0, false);
        return (bound(seed, 1, n), true);
    }

    /// @dev From the seed on, the first job in `status`, so that calls mostly reach the
    ///      escrow's success paths.
    function _jobIn(uint256 seed, JobEscrow.Status status) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        for (uint256 k; k < n; ++k) {
            uint256 id = (seed % n + k) % n + 1;
            if (escrow.getJob(id).status == status) return (id, true);
        }
        return (0, false);
    }

    struct GhostJob {
        uint256 deposited;
        uint256 paid;
        uint256 refunded;
        uint256 exits;
        uint256 settles;
        bytes32 snapshot;
    }

    /// @dev A job's ghost books in one call: the invariant reads them after every call.
    function ghostJob(uint256 jobId) external view returns (GhostJob memory g) {
        g.deposited = ghostDeposited[jobId];
        g.paid = ghostPaid[jobId];
        g.refunded = ghostRefunded[jobId];
        g.exits = ghostExits[jobId];
        g.settles = ghostSettles[jobId];
        g.snapshot = finishedSnapshot[jobId];
    }

    /// @dev Every account that could ever be credited, verifiers included (they never are).
    function actors() public view returns (address[] memory all) {
        uint256 c = clientPks.length;
        uint256 p = providerPks.length;
        all = new address[](c + p + verifierPks.length);
        for (uint256 i; i < c; ++i) all[i] = vm.addr(clientPks[i]);
        for (uint256 i; i < p; ++i) all[c + i] = vm.addr(providerPks[i]);
        for (uint256 i; i < verifierPks.length; ++i) all[c + p + i] = vm.addr(verifierPks[i]);
    }

    function providers() external view returns (address[] memory all) {
        all = new address[](providerPks.length);
        for (uint256 i; i < providerPks.length; ++i) all[i] = vm.addr(providerPks[i]);
    }

    // ------------------------------------------------------------- actions

    struct NewJob {
        address client;
        TestUSDC token;
        uint256 budget;
        uint256 maxPrice;
        uint64 total;
        uint64 interval;
        bytes32 specHash;
        uint8 quorum;
        uint64 deadline;
    }

    function createJob(
        uint256 clientSeed,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 slack,
        uint8 quorum,
        uint64 life
    ) external {
        if (escrow.jobCount() >= MAX_JOBS) return;
        NewJob memory nj;
        nj.client = vm.addr(clientPks[bound(clientSeed, 0, clientPks.length - 1)]);
        // a third of the jobs are paid in a token that is not the stake token
        nj.token = slack % 3 == 0 ? other : usdc;
        nj.total = uint64(bound(total, 1, 1000));
        // several checkpoints per job, so that runs reach replacements and completions
        nj.interval = uint64(bound(interval, 1, nj.total / 5 + 1));
        nj.maxPrice = bound(maxPrice, 1, 1e12);
        // sometimes exactly the budget needed, so that some completions leave nothing to settle
        nj.budget = nj.maxPrice * nj.total + (slack % 5 == 1 ? 0 : bound(slack, 0, 1e15));
        nj.specHash = keccak256(abi.encode(life));
        nj.quorum = uint8(bound(quorum, 2, verifierPks.length)); // the strict majorities of 3
        // short lives, so that runs reach expiry (warps are up to 2 hours each)
        nj.deadline = uint64(block.timestamp + bound(life, 30 minutes, 12 hours));
        uint256 jobId = _create(nj);
        ghostDeposited[jobId] = nj.budget;
        ghostIn[address(nj.token)] += nj.budget;
        calls["createJob"]++;
    }

    function _create(NewJob memory nj) internal returns (uint256) {
        address[] memory vs = new address[](verifierPks.length);
        for (uint256 i; i < vs.length; ++i) vs[i] = vm.addr(verifierPks[i]);
        vm.prank(nj.client);
        return escrow.createJob(
            IERC20(address(nj.token)),
            nj.budget,
            nj.maxPrice,
            nj.total,
            nj.interval,
            nj.specHash,
            vs,
            nj.quorum,
            nj.deadline,
            1 hours
        );
    }

    /// Registering adds to bonded, also while something is unbonding.
    function register(uint256 providerSeed, uint256 amount) external {
        address p = _provider(providerSeed);
        // mostly enough to be assigned, sometimes not
        amount = bound(amount, _minStake() / 4, 2 * _minStake());
        (, uint256 unbonding,,) = escrow.stakeOf(p);
        vm.prank(p);
        try escrow.register(amount) {
            ghostBonded[p] += amount;
            ghostIn[address(usdc)] += amount;
            calls["register"]++;
            if (unbonding != 0) calls["registerWhileUnbonding"]++;
        } catch {
            _mismatch("register refused");
        }
    }

    /// Partial unbonding: allowed exactly up to the stake above the live epochs' reservation.
    function requestUnbond(uint256 providerSeed, uint256 amount, bool overFree) external {
        address p = _provider(providerSeed);
        (uint256 bonded,,, uint32 live) = escrow.stakeOf(p);
        uint256 locked = uint256(live) * _minStake();
        uint256 free = bonded > locked ? bonded - locked : 0;
        amount = overFree ? free + bound(amount, 1, _minStake()) : bound(amount, 1, free > 0 ? free : 1);
        vm.prank(p);
        try escrow.requestUnbond(amount) {
            if (amount > free) _mismatch("unbonded reserved stake");
            (,, uint64 at,) = escrow.stakeOf(p);
            if (at != block.timestamp + escrow.unbondDelay()) _mismatch("unbond delay not restarted");
            ghostBonded[p] -= amount;
            ghostUnbonding[p] += amount;
            calls["requestUnbond"]++;
            if (live != 0) calls["requestUnbondWhileLive"]++;
        } catch {
            if (amount <= free) _mismatch("refused to unbond free stake");
        }
    }

    function withdrawStake(uint256 providerSeed) external {
        address p = _provider(providerSeed);
        (uint256 bonded, uint256 unbonding, uint64 at,) = escrow.stakeOf(p);
        uint256 before = usdc.balanceOf(p);
        vm.prank(p);
        try escrow.withdrawStake() {
            if (unbonding == 0 || block.timestamp < at) _mismatch("stake withdrawn early");
            if (usdc.balanceOf(p) - before != unbonding) _mismatch("stake paid out");
            (uint256 bondedAfter,,,) = escrow.stakeOf(p);
            if (bondedAfter != bonded) _mismatch("bonded stake paid out");
            ghostUnbonding[p] = 0;
            ghostOut[address(usdc)] += unbonding;
            calls["withdrawStake"]++;
        } catch {
            if (unbonding != 0 && block.timestamp >= at) _mismatch("refused a due withdrawal");
        }
    }

    function assign(uint256 jobSeed, uint256 providerSeed, uint256 price) external {
        (uint256 jobId, bool ok) = _assignableJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        (uint256 pk, bool eligible) = _eligibleProvider(providerSeed, j);
        address p = vm.addr(pk);
        price = bound(price, 1, j.maxPricePerStep);
        bytes memory sig = _bid(pk, jobId, j, price);
        bool assignable = (j.status == JobEscrow.Status.Open || j.status == JobEscrow.Status.Assigned)
            && block.timestamp < j.deadline;
        vm.prank(j.client);
        try escrow.assign(jobId, p, price, uint64(block.timestamp + 60), sig) {
            if (!assignable) _mismatch("assigned a finished or late job");
            if (!eligible) _mismatch("assigned without a reservation");
            calls["assign"]++;
            if (j.status == JobEscrow.Status.Assigned && j.provider == p) calls["assignSameAgain"]++;
        } catch {
            if (assignable && eligible) _mismatch("refused an eligible provider");
        }
    }

    /// @dev The provider's bid over the job's terms for the next epoch, expiring in 60 s.
    function _bid(uint256 pk, uint256 jobId, JobEscrow.JobView memory j, uint256 price)
        internal
        view
        returns (bytes memory)
    {
        uint64 expiry = uint64(block.timestamp + 60);
        return signDigest(pk, escrow.hashBid(jobId, j.terms, j.epoch + 1, vm.addr(pk), price, expiry));
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

    /// @dev From the seed on, the first provider with bonded stake for one more epoch (its
    ///      epoch on this job, if it holds it, ends first), or the seed's one.
    function _eligibleProvider(uint256 seed, JobEscrow.JobView memory j) internal view returns (uint256, bool) {
        uint256 n = providerPks.length;
        for (uint256 k; k < n; ++k) {
            uint256 pk = providerPks[(seed % n + k) % n];
            if (_canHoldOneMore(vm.addr(pk), j)) return (pk, true);
        }
        uint256 fallbackPk = providerPks[seed % n];
        return (fallbackPk, _canHoldOneMore(vm.addr(fallbackPk), j));
    }

    function _canHoldOneMore(address p, JobEscrow.JobView memory j) internal view returns (bool) {
        (uint256 bonded,,, uint32 live) = escrow.stakeOf(p);
        if (j.status == JobEscrow.Status.Assigned && j.provider == p) live -= 1;
        return bonded >= (uint256(live) + 1) * _minStake();
    }

    function releaseProvider(uint256 jobSeed) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        vm.prank(escrow.getJob(jobId).client);
        try escrow.releaseProvider(jobId) {
            calls["releaseProvider"]++;
        } catch {
            _mismatch("release refused");
        }
    }

    /// The provider gives up its live epoch: no slash, the job reopens.
    function resign(uint256 jobSeed) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        address p = escrow.getJob(jobId).provider;
        (uint256 bonded,,, uint32 live) = escrow.stakeOf(p);
        vm.prank(p);
        try escrow.resign(jobId) {
            (uint256 bondedAfter,,, uint32 liveAfter) = escrow.stakeOf(p);
            if (bondedAfter != bonded) _mismatch("resign slashed");
            if (liveAfter + 1 != live) _mismatch("resign kept the epoch");
            if (escrow.getJob(jobId).status != JobEscrow.Status.Open) _mismatch("resign did not reopen");
            calls["resign"]++;
        } catch {
            _mismatch("resign refused");
        }
    }

    function acceptCheckpoint(uint256 jobSeed, uint64 intervals, uint256 signerSeed) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        // one to three intervals on, and now and then straight to the final step, so that runs
        // reach completions (and settle) as well as replacements
        uint64 step = j.lastAcceptedStep + j.checkpointInterval * uint64(bound(intervals, 1, 3));
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps || intervals % 4 == 0) step = j.totalSteps;
        bytes32 hash = keccak256(abi.encode(jobId, j.epoch, step));
        bytes[] memory sigs = _votes(jobId, j.epoch, step, hash, true, j.quorum, signerSeed);

        uint256 providerBefore = escrow.withdrawable(j.provider, IERC20(j.token));
        uint256 clientBefore = escrow.withdrawable(j.client, IERC20(j.token));
        try escrow.acceptCheckpoint(jobId, j.epoch, step, hash, sigs) {
            uint256 amount = uint256(step - j.lastAcceptedStep) * j.pricePerStep;
            ghostPaid[jobId] += amount;
            ghostCredits[j.provider][j.token] += amount;
            if (escrow.withdrawable(j.provider, IERC20(j.token)) - providerBefore != amount) {
                _mismatch("provider credit");
            }
            if (escrow.withdrawable(j.client, IERC20(j.token)) != clientBefore) _mismatch("completion credited");
            if (step == j.totalSteps) {
                if (escrow.getJob(jobId).remaining != j.remaining - amount) _mismatch("refund not kept");
                _finish(jobId);
            }
            calls["acceptCheckpoint"]++;
        } catch {
            if (block.timestamp <= uint256(j.deadline) + j.grace) _mismatch("accept refused");
        }
    }

    function rejectCheckpoint(uint256 jobSeed, uint256 signerSeed) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        uint64 step = j.lastAcceptedStep + j.checkpointInterval;
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps) step = j.totalSteps;
        bytes32 hash = keccak256("junk");
        bytes[] memory sigs = _votes(jobId, j.epoch, step, hash, false, j.quorum, signerSeed);
        (uint256 bondedBefore,,,) = escrow.stakeOf(j.provider);
        uint256 burnedBefore = escrow.burned();
        try escrow.rejectCheckpoint(jobId, j.epoch, step, hash, sigs) {
            (uint256 bondedAfter,,,) = escrow.stakeOf(j.provider);
            uint256 slashed = bondedBefore - bondedAfter;
            if (slashed != _minStake()) _mismatch("slash is not exactly minStake");
            if (escrow.burned() - burnedBefore != slashed) _mismatch("slash not burned");
            ghostBonded[j.provider] -= slashed;
            ghostBurned += slashed;
            ghostSlashes += 1;
            calls["rejectCheckpoint"]++;
        } catch {
            if (block.timestamp <= uint256(j.deadline) + j.grace) _mismatch("reject refused");
        }
    }

    /// Anyone settles a completed job: once, and only with something left.
    function settle(uint256 jobSeed, bool anyJob) external {
        (uint256 jobId, bool ok) = anyJob ? _job(jobSeed) : _settleableJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        bool due = j.status == JobEscrow.Status.Completed && j.remaining != 0;
        try escrow.settle(jobId) {
            if (!due) _mismatch("settled twice or early");
            ghostRefunded[jobId] += j.remaining;
            ghostCredits[j.client][j.token] += j.remaining;
            ghostSettles[jobId] += 1;
            finishedSnapshot[jobId] = keccak256(abi.encode(escrow.getJob(jobId)));
            calls["settle"]++;
        } catch {
            if (due) _mismatch("settle refused");
        }
    }

    /// @dev From the seed on, the first completed job with a refund left.
    function _settleableJob(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        for (uint256 k; k < n; ++k) {
            uint256 id = (seed % n + k) % n + 1;
            JobEscrow.JobView memory j = escrow.getJob(id);
            if (j.status == JobEscrow.Status.Completed && j.remaining != 0) return (id, true);
        }
        return (0, false);
    }

    function expire(uint256 jobSeed) external {
        (uint256 jobId, bool ok) = _job(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        try escrow.expire(jobId) {
            if (block.timestamp < uint256(j.deadline) + j.grace) _mismatch("expired early");
            ghostRefunded[jobId] += j.remaining;
            ghostCredits[j.client][j.token] += j.remaining;
            _finish(jobId);
            calls["expire"]++;
        } catch {}
    }

    function withdraw(uint256 actorSeed, bool inOther) external {
        address[] memory all = actors();
        IERC20 t = IERC20(address(inOther ? other : usdc));
        // from the seed on, the first account with a credit (or the seed's one)
        address who = all[actorSeed % all.length];
        for (uint256 k; k < all.length; ++k) {
            address a = all[(actorSeed % all.length + k) % all.length];
            if (escrow.withdrawable(a, t) != 0) {
                who = a;
                break;
            }
        }
        uint256 owed = escrow.withdrawable(who, t);
        uint256 before = t.balanceOf(who);
        vm.prank(who);
        try escrow.withdraw(t) {
            if (t.balanceOf(who) - before != owed) _mismatch("withdrawn amount");
            ghostCredits[who][address(t)] = 0;
            ghostOut[address(t)] += owed;
            calls["withdraw"]++;
        } catch {
            if (owed != 0) _mismatch("withdraw refused");
        }
    }

    function warp(uint256 secondsAhead) external {
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

/// @dev Tries to exit or settle a job and reports the outcome by reverting, so the probe
///      leaves no trace.
contract ExitProbe is Base {
    error Outcome(bool done, bool withdrawn);

    function probe(JobEscrow escrow, uint256 jobId, bool settle) external {
        bool done;
        bool withdrawn;
        if (settle) {
            try escrow.settle(jobId) {
                done = true;
            } catch {}
        } else {
            try escrow.expire(jobId) {
                done = true;
            } catch {}
        }
        if (done) {
            JobEscrow.JobView memory j = escrow.getJob(jobId);
            if (escrow.withdrawable(j.client, IERC20(j.token)) != 0) {
                vm.prank(j.client);
                try escrow.withdraw(IERC20(j.token)) {
                    withdrawn = true;
                } catch {}
            } else {
                withdrawn = true;
            }
        }
        revert Outcome(done, withdrawn);
    }
}

contract JobEscrowInvariantTest is Base {
    JobEscrow internal escrow;
    TestUSDC internal usdc;
    TestUSDC internal other;
    EscrowHandler internal handler;
    ExitProbe internal prober;

    function setUp() public {
        vm.warp(1_800_000_000);
        usdc = new TestUSDC();
        other = new TestUSDC();
        // an unbonding delay of 2 hours, so that runs reach withdrawStake
        escrow = new JobEscrow(IERC20(address(usdc)), 100e6, 2 hours, 7 days, 1 days);
        handler = new EscrowHandler(escrow, usdc, other);
        prober = new ExitProbe();
    }

    /// @dev forge finds this by name: only the handler is called at random.
    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    /// @dev One campaign checks every property after every call: on two cores, one
    ///      invariant function with more runs beats several with a fraction of them each.
    function invariant_escrow() public {
        uint256 n = escrow.jobCount();
        // jobs[id - 1]: read once per check round, every getJob is a large copy
        JobEscrow.JobView[] memory jobs = new JobEscrow.JobView[](n);
        for (uint256 id = 1; id <= n; ++id) {
            jobs[id - 1] = escrow.getJob(id);
        }
        assertEq(handler.mismatches(), 0, handler.lastMismatch());
        _checkStakes(jobs);
        address[] memory all = handler.actors();
        _checkConservation(jobs, all, address(usdc));
        _checkConservation(jobs, all, address(other));
        _checkPerJob(jobs);
        _checkPastDeadlineCanExit(jobs);
    }

    /// Every provider's bonded and unbonding stake is what the ghost book says; bonded ≥
    /// liveEpochs × minStake, so every reject can slash exactly minStake; live epochs per
    /// provider equal the jobs it holds, so Σ liveEpochs == the number of Assigned jobs;
    /// burned == Σ slashes, each exactly minStake.
    function _checkStakes(JobEscrow.JobView[] memory jobs) internal view {
        address[] memory ps = handler.providers();
        uint256 liveSum;
        for (uint256 p; p < ps.length; ++p) {
            (uint256 bonded, uint256 unbonding, uint64 at, uint32 live) = escrow.stakeOf(ps[p]);
            assertEq(bonded, handler.ghostBonded(ps[p]), "bonded matches the ghost book");
            assertEq(unbonding, handler.ghostUnbonding(ps[p]), "unbonding matches the ghost book");
            assertTrue(bonded >= uint256(live) * escrow.minStake(), "bonded below the reservation");
            assertTrue((unbonding == 0) == (at == 0), "unbondAt set iff something unbonds");
            uint256 held;
            for (uint256 i; i < jobs.length; ++i) {
                if (jobs[i].status == JobEscrow.Status.Assigned && jobs[i].provider == ps[p]) held++;
            }
            assertEq(live, held, "live epochs");
            liveSum += live;
        }
        uint256 assigned;
        for (uint256 i; i < jobs.length; ++i) {
            if (jobs[i].status == JobEscrow.Status.Assigned) assigned++;
        }
        assertEq(liveSum, assigned, "sum of live epochs == Assigned jobs");
        assertEq(escrow.burned(), handler.ghostBurned(), "burned == sum of slashes");
        assertEq(handler.ghostBurned(), handler.ghostSlashes() * escrow.minStake(), "each slash is minStake");
    }

    /// To the unit, per token: balance == Σbonded + Σunbonding + burned (stake token only) +
    /// Σcredits + Σremaining of the jobs in it that are Open, Assigned or Completed; and
    /// == what came in − what went out. Every credit matches the ghost book.
    function _checkConservation(JobEscrow.JobView[] memory jobs, address[] memory all, address t)
        internal
        view
    {
        uint256 owed;
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            if (j.token != t) continue;
            if (j.status == JobEscrow.Status.Expired) {
                assertEq(j.remaining, 0, "an expired job keeps nothing");
            } else {
                owed += j.remaining;
            }
        }
        if (t == address(usdc)) {
            address[] memory ps = handler.providers();
            for (uint256 p; p < ps.length; ++p) {
                (uint256 bonded, uint256 unbonding,,) = escrow.stakeOf(ps[p]);
                owed += bonded + unbonding;
            }
            owed += escrow.burned();
        }
        for (uint256 i; i < all.length; ++i) {
            uint256 credit = escrow.withdrawable(all[i], IERC20(t));
            assertEq(credit, handler.ghostCredits(all[i], t), "credit matches the ghost book");
            owed += credit;
        }
        uint256 held = IERC20(t).balanceOf(address(escrow));
        assertEq(held, owed, "conservation: balance == obligations + burned");
        assertEq(held, handler.ghostIn(t) - handler.ghostOut(t), "balance == in - out");
    }

    /// Per job: paid + refunded + remaining == deposited; a job exits at most once and is
    /// settled at most once; a finished job changes only by its one settle.
    function _checkPerJob(JobEscrow.JobView[] memory jobs) internal view {
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            EscrowHandler.GhostJob memory g = handler.ghostJob(i + 1);
            assertEq(j.deposit, g.deposited, "deposit");
            assertEq(g.paid + g.refunded + j.remaining, j.deposit, "conservation");
            assertTrue(g.exits <= 1, "job exited twice");
            assertTrue(g.settles <= 1, "job settled twice");
            bool finished = j.status == JobEscrow.Status.Completed || j.status == JobEscrow.Status.Expired;
            assertEq(g.exits, finished ? 1 : 0, "exit recorded iff finished");
            if (g.settles == 1) {
                assertTrue(j.status == JobEscrow.Status.Completed, "settled a job that is not completed");
                assertEq(j.remaining, 0, "settled job keeps nothing");
            }
            if (finished) {
                assertEq(keccak256(abi.encode(j)), g.snapshot, "finished job changed");
            } else {
                assertEq(g.refunded, 0, "refund before finishing");
            }
            assertTrue(j.lastAcceptedStep <= j.totalSteps, "step bound");
        }
    }

    /// Any job past deadline + grace that has not finished can be expired, and any completed
    /// job with a refund left can be settled; either way its client can be paid.
    function _checkPastDeadlineCanExit(JobEscrow.JobView[] memory jobs) internal {
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            bool live = j.status == JobEscrow.Status.Open || j.status == JobEscrow.Status.Assigned;
            bool settleable = j.status == JobEscrow.Status.Completed && j.remaining != 0;
            if (!settleable && (!live || block.timestamp < uint256(j.deadline) + j.grace)) continue;
            try prober.probe(escrow, i + 1, settleable) {
                assertTrue(false, "probe returned");
            } catch (bytes memory reason) {
                assertEq(reason, abi.encodeWithSelector(ExitProbe.Outcome.selector, true, true), "job cannot exit");
            }
        }
    }
}
