// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Base} from "./utils/Base.sol";
import {JobEscrow} from "../src/JobEscrow.sol";
import {TestUSDC} from "../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev What a job's `remaining` must cover once `last` steps are accepted: every step left at
///      the maximum price, and a fee for every member on every checkpoint left.
function reserve(JobEscrow.JobView memory j, uint64 last) pure returns (uint256) {
    uint256 left = j.totalSteps - last;
    return j.maxPricePerStep * left
        + j.verifierFee * j.committeeSize * ((left + j.checkpointInterval - 1) / j.checkpointInterval);
}

/// @dev Drives the escrow through random sequences of real calls by keyed actors and keeps
///      ghost books of what should have happened: every provider's and verifier's bonded and
///      unbonding stake, every account's credits per token, every job's payouts, fees charged
///      and credited and refunds, each member's paid decisions, what went in and out per
///      token, what was burned and for which rejects. Calls that the escrow refuses are simply
///      refused (fail_on_revert is off); whenever the escrow's decision or result differs from
///      the rules the handler records a mismatch, which the invariants report. Jobs are paid
///      in the stake token or in a second token, so both forms of the conservation equation
///      are exercised. One client is also a verifier, so draws must skip it.
contract EscrowHandler is Base {
    JobEscrow public immutable escrow;
    TestUSDC public immutable usdc; // the stake token
    TestUSDC public immutable other; // a job token that is not the stake token

    uint256[3] internal clientPks = [uint256(0xC1), 0xC2, 0xC3];
    uint256[4] internal providerPks = [uint256(0xA1), 0xA2, 0xA3, 0xA4];
    // 0xC1 is a client too: it sits in the pool but is never drawn for its own jobs
    uint256[6] internal verifierPks = [uint256(0xB1), 0xB2, 0xB3, 0xB4, 0xB5, 0xC1];
    mapping(address => uint256) internal pkOf;

    uint256 public constant MAX_JOBS = 20;

    // ghost books, per job
    mapping(uint256 => uint256) public ghostDeposited;
    mapping(uint256 => uint256) public ghostPaid;
    mapping(uint256 => uint256) public ghostFeesCharged;
    mapping(uint256 => uint256) public ghostFeesCredited;
    mapping(uint256 => uint256) public ghostRefunded;
    mapping(uint256 => uint256) public ghostExits; // completions and expiries
    mapping(uint256 => uint256) public ghostSettles;
    mapping(uint256 => bytes32) public finishedSnapshot;
    mapping(uint256 => mapping(address => uint256)) public ghostMemberPaid;
    // ghost books, per provider, verifier, account and token
    mapping(address => uint256) public ghostBonded;
    mapping(address => uint256) public ghostUnbonding;
    mapping(address => uint256) public ghostVBonded;
    mapping(address => uint256) public ghostVUnbonding;
    mapping(address account => mapping(address token => uint256)) public ghostCredits;
    mapping(address token => uint256) public ghostIn;
    mapping(address token => uint256) public ghostOut;
    // ghost books, global
    uint256 public ghostBurned; // Σ slashes
    uint256 public ghostSlashes; // how many
    uint256 public ghostUnanimousRejects;
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
        // providers start with stake for two epochs, so that assignments land from the start
        for (uint256 i; i < providerPks.length; ++i) {
            address p = vm.addr(providerPks[i]);
            _fund(usdc, p);
            uint256 providerStake = 2 * escrow_.minStake();
            vm.prank(p);
            escrow_.register(providerStake);
            ghostBonded[p] = providerStake;
            ghostIn[address(usdc_)] += providerStake;
        }
        for (uint256 i; i < verifierPks.length; ++i) {
            address v = vm.addr(verifierPks[i]);
            pkOf[v] = verifierPks[i];
            if (i < 5) _fund(usdc, v);
        }
        // four verifiers pooled from the start, so that jobs can be created at once
        uint256 stake = 2 * escrow_.minVerifierStake();
        for (uint256 i; i < 4; ++i) {
            address v = vm.addr(verifierPks[i]);
            vm.prank(v);
            escrow_.registerVerifier(stake);
            ghostVBonded[v] = stake;
            ghostIn[address(usdc_)] += stake;
        }
        // three jobs drawn and two of them assigned from the start, so that every run decides
        // on checkpoints early
        for (uint256 i; i < 3; ++i) {
            NewJob memory nj = _plan(i + 1, 1e6, 400, 80, 4 + i, 3, 2, 1 + i, uint64(6 hours + i));
            uint256 jobId = _createNow(nj);
            _booked(jobId, nj);
            _draw(jobId, false);
            if (i < 2) _assignNow(jobId, providerPks[i], 5e5);
        }
    }

    function _assignNow(uint256 jobId, uint256 pk, uint256 price) internal {
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        bytes memory sig = _bid(pk, jobId, j, price);
        vm.prank(j.client);
        escrow.assign(jobId, vm.addr(pk), price, uint64(block.timestamp + 60), sig);
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

    function _verifier(uint256 seed) internal view returns (address) {
        return vm.addr(verifierPks[bound(seed, 0, verifierPks.length - 1)]);
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
        uint256 feesCharged;
        uint256 feesCredited;
        uint256 refunded;
        uint256 exits;
        uint256 settles;
        bytes32 snapshot;
    }

    /// @dev A job's ghost books in one call: the invariant reads them after every call.
    function ghostJob(uint256 jobId) external view returns (GhostJob memory g) {
        g.deposited = ghostDeposited[jobId];
        g.paid = ghostPaid[jobId];
        g.feesCharged = ghostFeesCharged[jobId];
        g.feesCredited = ghostFeesCredited[jobId];
        g.refunded = ghostRefunded[jobId];
        g.exits = ghostExits[jobId];
        g.settles = ghostSettles[jobId];
        g.snapshot = finishedSnapshot[jobId];
    }

    /// @dev Every account that could ever be credited: clients, providers, verifiers.
    function actors() public view returns (address[] memory all) {
        uint256 c = clientPks.length;
        uint256 p = providerPks.length;
        uint256 v = verifierPks.length - 1; // 0xC1 is a client already
        all = new address[](c + p + v);
        for (uint256 i; i < c; ++i) all[i] = vm.addr(clientPks[i]);
        for (uint256 i; i < p; ++i) all[c + i] = vm.addr(providerPks[i]);
        for (uint256 i; i < v; ++i) all[c + p + i] = vm.addr(verifierPks[i]);
    }

    function providers() external view returns (address[] memory all) {
        all = new address[](providerPks.length);
        for (uint256 i; i < providerPks.length; ++i) all[i] = vm.addr(providerPks[i]);
    }

    function verifiers() external view returns (address[] memory all) {
        all = new address[](verifierPks.length);
        for (uint256 i; i < verifierPks.length; ++i) all[i] = vm.addr(verifierPks[i]);
    }

    /// @dev Accounts other than `client` the pool holds now: what a committee can be drawn from.
    function _available(address client) internal view returns (uint256 n) {
        n = escrow.poolSize();
        (,,, bool pooled) = escrow.verifierStakeOf(client);
        if (pooled) n -= 1;
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
        uint8 size;
        uint8 quorum;
        uint256 fee;
        uint64 deadline;
    }

    function createJob(
        uint256 clientSeed,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 slack,
        uint8 size,
        uint8 quorum,
        uint256 fee,
        uint64 life
    ) external {
        if (escrow.jobCount() >= MAX_JOBS) return;
        NewJob memory nj = _plan(clientSeed, maxPrice, total, interval, slack, size, quorum, fee, life);
        bool poolOk = _available(nj.client) >= nj.size;
        try this.create(nj) returns (uint256 jobId) {
            if (!poolOk) _mismatch("created without enough verifiers");
            _booked(jobId, nj);
            // most jobs are drawn at once by the next block, as nodes do; the rest wait for
            // `drawCommittee` (and some of them for a re-anchored seed)
            if (life % 3 != 0) _draw(jobId, false);
        } catch (bytes memory reason) {
            if (poolOk) _mismatch("create refused");
            if (bytes4(reason) != JobEscrow.NotEnoughVerifiers.selector) _mismatch("create refused otherwise");
            calls["createJobRefused"]++;
        }
    }

    function _booked(uint256 jobId, NewJob memory nj) internal {
        ghostDeposited[jobId] = nj.budget;
        ghostIn[address(nj.token)] += nj.budget;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        if (j.status != JobEscrow.Status.Drawing || j.seedBlock != block.number) _mismatch("created not drawing");
        calls["createJob"]++;
    }

    function _plan(
        uint256 clientSeed,
        uint256 maxPrice,
        uint64 total,
        uint64 interval,
        uint256 slack,
        uint8 size,
        uint8 quorum,
        uint256 fee,
        uint64 life
    ) internal view returns (NewJob memory nj) {
        nj.client = vm.addr(clientPks[bound(clientSeed, 0, clientPks.length - 1)]);
        // a third of the jobs are paid in a token that is not the stake token
        nj.token = slack % 3 == 0 ? other : usdc;
        nj.total = uint64(bound(total, 1, 1000));
        // several checkpoints per job, so that runs reach replacements and completions
        nj.interval = uint64(bound(interval, 1, nj.total / 5 + 1));
        nj.maxPrice = bound(maxPrice, 1, 1e12);
        nj.size = uint8(bound(size, 2, 4));
        nj.quorum = uint8(bound(quorum, nj.size / 2 + 1, nj.size)); // the strict majorities
        nj.fee = fee % 4 == 0 ? 0 : bound(fee, 1, 1e9);
        uint256 needed = nj.maxPrice * nj.total
            + nj.fee * nj.size * ((uint256(nj.total) + nj.interval - 1) / nj.interval);
        // sometimes exactly the budget needed (no slack: rejects pay no fees, completions may
        // leave nothing to settle), sometimes room for a few fees only
        uint256 kind = slack % 5;
        nj.budget = needed + (kind == 1 ? 0 : kind == 2 ? nj.fee * bound(slack, 1, 4) : bound(slack, 0, 1e15));
        nj.specHash = keccak256(abi.encode(life));
        // short lives, so that runs reach expiry (warps are up to 2 hours each)
        nj.deadline = uint64(block.timestamp + bound(life, 30 minutes, 12 hours));
    }

    /// @dev External so that `createJob` can catch its revert; only this contract calls it.
    function create(NewJob memory nj) external returns (uint256) {
        require(msg.sender == address(this), "self only");
        return _createNow(nj);
    }

    function _createNow(NewJob memory nj) internal returns (uint256) {
        vm.prank(nj.client);
        return escrow.createJob(
            IERC20(address(nj.token)),
            nj.budget,
            nj.maxPrice,
            nj.total,
            nj.interval,
            nj.specHash,
            nj.size,
            nj.quorum,
            nj.fee,
            nj.deadline,
            1 hours
        );
    }

    /// Anyone draws a job's committee: it must be exactly the spec's draw over the pool as it
    /// is, or the seed must move when its hash is gone, or the call must be refused as the
    /// spec says.
    function drawCommittee(uint256 jobSeed, bool sameBlock) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Drawing);
        if (!ok) return;
        _draw(jobId, sameBlock);
    }

    function _draw(uint256 jobId, bool sameBlock) internal {
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        // a node draws in a block after the seed block; now and then one tries too early
        if (!sameBlock && block.number <= j.seedBlock) vm.roll(block.number + 1);
        bool mined = block.number > j.seedBlock;
        bytes32 h = blockhash(j.seedBlock);
        // the seed moves when its hash is gone or the pool is no longer the seed block's
        bool moves = h == bytes32(0) || escrow.poolChangedAt() > j.seedBlock;
        bool enough = _available(j.client) >= j.committeeSize;
        address[] memory expected;
        if (mined && !moves && enough) expected = _expectedCommittee(h, jobId, j.client, j.committeeSize);
        try escrow.drawCommittee(jobId) {
            if (!mined) _mismatch("drawn before the seed was mined");
            JobEscrow.JobView memory after_ = escrow.getJob(jobId);
            if (moves) {
                if (after_.seedBlock != block.number || after_.status != JobEscrow.Status.Drawing) {
                    _mismatch("seed not moved");
                }
                calls["drawReanchored"]++;
                return;
            }
            if (!enough) _mismatch("drawn from a short pool");
            if (keccak256(abi.encode(after_.committee)) != keccak256(abi.encode(expected))) {
                _mismatch("not the spec's draw");
            }
            if (after_.status != JobEscrow.Status.Open || after_.terms == bytes32(0)) _mismatch("not opened");
            calls["drawCommittee"]++;
        } catch {
            if (mined && (moves || enough)) _mismatch("draw refused");
            calls["drawRefused"]++;
        }
    }

    /// @dev The spec's draw, over the pool as the escrow holds it now.
    function _expectedCommittee(bytes32 h, uint256 jobId, address client, uint256 size)
        internal
        view
        returns (address[] memory committee)
    {
        uint256 n = escrow.poolSize();
        address[] memory pool = new address[](n);
        for (uint256 i; i < n; ++i) pool[i] = escrow.poolAt(i);
        committee = new address[](size);
        bytes32 seed = keccak256(abi.encode(h, jobId));
        for (uint256 i; i < size; ++i) {
            uint256 idx = uint256(keccak256(abi.encode(seed, i))) % n;
            while (pool[idx] == client || _has(committee, pool[idx])) idx = (idx + 1) % n;
            committee[i] = pool[idx];
        }
    }

    function _has(address[] memory list, address x) internal pure returns (bool) {
        for (uint256 i; i < list.length; ++i) {
            if (list[i] == x) return true;
        }
        return false;
    }

    // ------------------------------------------------------ verifier stake

    function _registerVerifier(uint256 verifierSeed, uint256 amount) internal {
        address v = _verifier(verifierSeed);
        uint256 min = escrow.minVerifierStake();
        amount = bound(amount, min / 4, 2 * min);
        if (v == vm.addr(0xC1) && usdc.balanceOf(v) < amount) return; // the client's own funds
        vm.prank(v);
        try escrow.registerVerifier(amount) {
            ghostVBonded[v] += amount;
            ghostIn[address(usdc)] += amount;
            calls["registerVerifier"]++;
        } catch {
            _mismatch("registerVerifier refused");
        }
    }

    function _requestVerifierUnbond(uint256 verifierSeed, uint256 amount, bool over) internal {
        address v = _verifier(verifierSeed);
        (uint256 bonded,,,) = escrow.verifierStakeOf(v);
        uint256 min = escrow.minVerifierStake();
        if (over) {
            amount = bonded + bound(amount, 1, 10);
        } else if (bonded > min) {
            // half the time a part that keeps the verifier pooled, half the time enough to
            // leave the pool (the pool's last entry then moves into its place)
            amount = amount % 2 == 0 ? bound(amount, 1, bonded - min) : bound(amount, bonded - min + 1, bonded);
        } else {
            amount = bound(amount, 1, bonded > 0 ? bonded : 1);
        }
        vm.prank(v);
        try escrow.requestVerifierUnbond(amount) {
            if (amount > bonded) _mismatch("unbonded more than bonded");
            ghostVBonded[v] -= amount;
            ghostVUnbonding[v] += amount;
            calls["requestVerifierUnbond"]++;
        } catch {
            if (amount <= bonded) _mismatch("refused a verifier unbond");
        }
    }

    function _withdrawVerifierStake(uint256 verifierSeed) internal {
        address v = _verifier(verifierSeed);
        (uint256 bonded, uint256 unbonding, uint64 at,) = escrow.verifierStakeOf(v);
        uint256 before = usdc.balanceOf(v);
        vm.prank(v);
        try escrow.withdrawVerifierStake() {
            if (unbonding == 0 || block.timestamp < at) _mismatch("verifier stake withdrawn early");
            if (usdc.balanceOf(v) - before != unbonding) _mismatch("verifier stake paid out");
            (uint256 bondedAfter,,,) = escrow.verifierStakeOf(v);
            if (bondedAfter != bonded) _mismatch("bonded verifier stake paid out");
            ghostVUnbonding[v] = 0;
            ghostOut[address(usdc)] += unbonding;
            calls["withdrawVerifierStake"]++;
        } catch {
            if (unbonding != 0 && block.timestamp >= at) _mismatch("refused a due verifier withdrawal");
        }
    }

    // ------------------------------------------------------ provider stake

    /// Registering adds to bonded, also while something is unbonding; a verifier joins the
    /// pool at the minimum.
    function register(uint256 providerSeed, uint256 amount, bool verifier) external {
        if (verifier) return _registerVerifier(providerSeed, amount);
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

    /// Partial unbonding: a provider's is allowed exactly up to the stake above its live
    /// epochs' reservation; a verifier's up to its bonded stake, leaving the pool below the
    /// minimum.
    function requestUnbond(uint256 providerSeed, uint256 amount, bool overFree, bool verifier) external {
        if (verifier) return _requestVerifierUnbond(providerSeed, amount, overFree);
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

    function withdrawStake(uint256 providerSeed, bool verifier) external {
        if (verifier) return _withdrawVerifierStake(providerSeed);
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

    // ---------------------------------------------------------------- epochs

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
            if (!assignable) _mismatch("assigned a finished, drawing or late job");
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

    /// @dev From the seed on, the first job still open to assignment (mostly an open one
    ///      first, so that epochs are opened more often than replaced), or the seed's job.
    function _assignableJob(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        if (n == 0) return (0, false);
        if (seed % 4 != 0) {
            for (uint256 k; k < n; ++k) {
                uint256 id = (seed % n + k) % n + 1;
                JobEscrow.JobView memory j = escrow.getJob(id);
                if (j.status == JobEscrow.Status.Open && block.timestamp < j.deadline) return (id, true);
            }
        }
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
        // a third as often as the other actions, so that epochs live long enough to decide on
        if (jobSeed % 3 != 0) return;
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
        if (jobSeed % 3 != 0) return; // as for releaseProvider
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

    // ------------------------------------------------------------ decisions

    /// @dev `count` (bounded to quorum..committee) signers, consecutive committee positions
    ///      from the seed's; `voters` their bit set.
    struct Signers {
        address[] who;
        uint256 voters;
    }

    function _signers(JobEscrow.JobView memory j, uint256 seed, uint256 count)
        internal
        pure
        returns (Signers memory s)
    {
        uint256 size = j.committee.length;
        count = bound(count, j.quorum, size);
        s.who = new address[](count);
        uint256 start = seed % size;
        for (uint256 i; i < count; ++i) {
            uint256 pos = (start + i) % size;
            s.who[i] = j.committee[pos];
            s.voters |= 1 << pos;
        }
    }

    function _sign(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept, Signers memory s)
        internal
        view
        returns (bytes[] memory sigs)
    {
        bytes32 digest = escrow.hashVote(jobId, epoch, step, hash, accept);
        sigs = new bytes[](s.who.length);
        for (uint256 i; i < s.who.length; ++i) sigs[i] = signDigest(pkOf[s.who[i]], digest);
    }

    /// @dev Books the fees of a decision the escrow charged, and checks each signer's count.
    function _chargeFees(uint256 jobId, JobEscrow.JobView memory j, Signers memory s, bool charged) internal {
        if (charged) ghostFeesCharged[jobId] += j.verifierFee * s.who.length;
        for (uint256 i; i < s.who.length; ++i) {
            if (charged) ghostMemberPaid[jobId][s.who[i]] += 1;
            (, uint64 paid) = escrow.memberOf(jobId, s.who[i]);
            if (paid != ghostMemberPaid[jobId][s.who[i]]) _mismatch("member's paid count");
        }
    }

    function acceptCheckpoint(uint256 jobSeed, uint64 intervals, uint256 signerSeed, uint256 count) external {
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        // one to three intervals on, and now and then straight to the final step, so that runs
        // reach completions (and settle) as well as replacements
        uint64 step = j.lastAcceptedStep + j.checkpointInterval * uint64(bound(intervals, 1, 3));
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps || intervals % 4 == 0) step = j.totalSteps;
        bytes32 hash = keccak256(abi.encode(jobId, j.epoch, step));
        Signers memory s = _signers(j, signerSeed, count);
        bytes[] memory sigs = _sign(jobId, j.epoch, step, hash, true, s);

        uint256 providerBefore = escrow.withdrawable(j.provider, IERC20(j.token));
        uint256 clientBefore = escrow.withdrawable(j.client, IERC20(j.token));
        try escrow.acceptCheckpoint(jobId, j.epoch, step, hash, sigs) {
            uint256 amount = uint256(step - j.lastAcceptedStep) * j.pricePerStep;
            uint256 fees = j.verifierFee * s.who.length;
            ghostPaid[jobId] += amount;
            ghostCredits[j.provider][j.token] += amount;
            _chargeFees(jobId, j, s, true);
            if (escrow.withdrawable(j.provider, IERC20(j.token)) - providerBefore != amount) {
                _mismatch("provider credit");
            }
            if (escrow.withdrawable(j.client, IERC20(j.token)) != clientBefore) _mismatch("completion credited");
            if (escrow.getJob(jobId).remaining != j.remaining - amount - fees) _mismatch("accept's charge");
            if (step == j.totalSteps) _finish(jobId);
            calls["acceptCheckpoint"]++;
            if (s.who.length > j.quorum) calls["acceptMoreThanQuorum"]++;
        } catch {
            if (block.timestamp <= uint256(j.deadline) + j.grace) _mismatch("accept refused");
        }
    }

    /// A quorum's accept of an epoch the client ended, up to three epochs back: it lands
    /// exactly when the record is there, the window and the job's grace are not over and the
    /// head has not moved; it pays the ended epoch's provider at its price and the signers
    /// their fees, and supersedes a live epoch.
    function acceptLate(uint256 jobSeed, uint64 back, uint256 signerSeed, uint256 count) external {
        (uint256 jobId, bool ok) = _job(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        if (j.committee.length == 0) return;
        // the live epoch's own accepts are `acceptCheckpoint`'s
        uint64 first = j.status == JobEscrow.Status.Assigned ? 1 : 0;
        if (j.epoch <= first) return;
        uint64 epoch = j.epoch - uint64(bound(back, first, j.epoch - 1 > first + 2 ? first + 2 : j.epoch - 1));
        _tryLate(jobId, j, epoch, _lateExpectation(jobId, j, epoch), _signers(j, signerSeed, count));
    }

    struct Late {
        address paid;
        uint256 price;
        uint64 step;
        bool live;
        bool lands;
    }

    function _lateExpectation(uint256 jobId, JobEscrow.JobView memory j, uint64 epoch)
        internal
        view
        returns (Late memory l)
    {
        uint64 stepAtEnd;
        uint64 windowEnd;
        (l.paid, l.price, stepAtEnd, windowEnd) = escrow.closedEpoch(jobId, epoch);
        l.step = j.lastAcceptedStep + j.checkpointInterval;
        l.step -= l.step % j.checkpointInterval;
        if (l.step > j.totalSteps) l.step = j.totalSteps;
        l.live = j.status == JobEscrow.Status.Assigned;
        l.lands = l.paid != address(0) && (l.live || j.status == JobEscrow.Status.Open)
            && block.timestamp <= windowEnd
            && block.timestamp <= uint256(j.deadline) + j.grace && j.lastAcceptedStep == stepAtEnd;
    }

    function _tryLate(uint256 jobId, JobEscrow.JobView memory j, uint64 epoch, Late memory l, Signers memory s)
        internal
    {
        bytes32 hash = keccak256(abi.encode(jobId, epoch, l.step, "late"));
        bytes[] memory sigs = _sign(jobId, epoch, l.step, hash, true, s);
        uint256 before = escrow.withdrawable(l.paid, IERC20(j.token));
        try escrow.acceptCheckpoint(jobId, epoch, l.step, hash, sigs) {
            if (!l.lands) _mismatch("late accept landed");
            uint256 amount = uint256(l.step - j.lastAcceptedStep) * l.price;
            ghostPaid[jobId] += amount;
            ghostCredits[l.paid][j.token] += amount;
            _chargeFees(jobId, j, s, true);
            if (escrow.withdrawable(l.paid, IERC20(j.token)) - before != amount) _mismatch("late credit");
            if (escrow.getJob(jobId).remaining != j.remaining - amount - j.verifierFee * s.who.length) {
                _mismatch("late accept's charge");
            }
            (address still,,,) = escrow.closedEpoch(jobId, epoch);
            if (still != address(0)) _mismatch("late accept twice");
            if (escrow.getJob(jobId).status == JobEscrow.Status.Assigned) _mismatch("live epoch not superseded");
            if (l.step == j.totalSteps) _finish(jobId);
            calls["acceptLate"]++;
            if (l.live) calls["acceptLateSuperseding"]++;
        } catch {
            if (l.lands) _mismatch("late accept refused");
            if (l.paid != address(0)) calls["acceptLateRefused"]++;
        }
    }

    /// A quorum (or more) rejects: the epoch ends; the provider is slashed minStake exactly
    /// when the whole committee signed; the signers are paid exactly when the slack covers
    /// their fees.
    function rejectCheckpoint(uint256 jobSeed, uint256 signerSeed, uint256 count) external {
        // half as often as accepts, so that epochs live long enough to be accepted
        if (signerSeed % 2 == 0) return;
        (uint256 jobId, bool ok) = _jobIn(jobSeed, JobEscrow.Status.Assigned);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        uint64 step = j.lastAcceptedStep + j.checkpointInterval;
        step -= step % j.checkpointInterval;
        if (step > j.totalSteps) step = j.totalSteps;
        bytes32 hash = keccak256("junk");
        // a third of the rejects are unanimous
        Signers memory s = _signers(j, signerSeed, count % 3 == 0 ? j.committeeSize : count);
        bytes[] memory sigs = _sign(jobId, j.epoch, step, hash, false, s);
        RejectCase memory c;
        c.unanimous = s.who.length == j.committeeSize;
        c.pays = j.remaining >= reserve(j, j.lastAcceptedStep) + j.verifierFee * s.who.length;
        (c.bondedBefore,,,) = escrow.stakeOf(j.provider);
        c.burnedBefore = escrow.burned();
        try escrow.rejectCheckpoint(jobId, j.epoch, step, hash, sigs) {
            _afterReject(jobId, j, s, c);
        } catch {
            if (block.timestamp <= uint256(j.deadline) + j.grace) _mismatch("reject refused");
        }
    }

    struct RejectCase {
        bool unanimous;
        bool pays;
        uint256 bondedBefore;
        uint256 burnedBefore;
    }

    function _afterReject(uint256 jobId, JobEscrow.JobView memory j, Signers memory s, RejectCase memory c) internal {
        (uint256 bondedAfter,,,) = escrow.stakeOf(j.provider);
        uint256 slashed = c.bondedBefore - bondedAfter;
        if (slashed != (c.unanimous ? _minStake() : 0)) _mismatch("slash is not minStake iff unanimous");
        if (escrow.burned() - c.burnedBefore != slashed) _mismatch("slash not burned");
        uint256 charged = c.pays ? j.verifierFee * s.who.length : 0;
        if (escrow.getJob(jobId).remaining != j.remaining - charged) _mismatch("reject's charge");
        _chargeFees(jobId, j, s, c.pays);
        ghostBonded[j.provider] -= slashed;
        ghostBurned += slashed;
        if (slashed != 0) ghostSlashes += 1;
        if (c.unanimous) ghostUnanimousRejects += 1;
        calls["rejectCheckpoint"]++;
        if (c.unanimous) calls["rejectUnanimous"]++;
        if (!c.pays) calls["rejectUnpaid"]++;
    }

    // ---------------------------------------------------------------- exits

    /// @dev Books the fee credits settle and expire make: each member `paid × fee`.
    function _creditFees(uint256 jobId, JobEscrow.JobView memory j) internal {
        for (uint256 i; i < j.committee.length; ++i) {
            address m = j.committee[i];
            uint256 amount = ghostMemberPaid[jobId][m] * j.verifierFee;
            ghostCredits[m][j.token] += amount;
            ghostFeesCredited[jobId] += amount;
        }
    }

    /// Anyone settles a completed job, once, whatever is left (possibly nothing).
    function settle(uint256 jobSeed, bool anyJob) external {
        (uint256 jobId, bool ok) = anyJob ? _job(jobSeed) : _settleableJob(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        bool due = j.status == JobEscrow.Status.Completed && !j.settled;
        try escrow.settle(jobId) {
            if (!due) _mismatch("settled twice or early");
            _creditFees(jobId, j);
            ghostRefunded[jobId] += j.remaining;
            ghostCredits[j.client][j.token] += j.remaining;
            ghostSettles[jobId] += 1;
            finishedSnapshot[jobId] = keccak256(abi.encode(escrow.getJob(jobId)));
            calls["settle"]++;
            if (j.remaining == 0) calls["settleNothingLeft"]++;
        } catch {
            if (due) _mismatch("settle refused");
        }
    }

    /// @dev From the seed on, the first completed job not settled yet.
    function _settleableJob(uint256 seed) internal view returns (uint256 jobId, bool ok) {
        uint256 n = escrow.jobCount();
        for (uint256 k; k < n; ++k) {
            uint256 id = (seed % n + k) % n + 1;
            JobEscrow.JobView memory j = escrow.getJob(id);
            if (j.status == JobEscrow.Status.Completed && !j.settled) return (id, true);
        }
        return (0, false);
    }

    function expire(uint256 jobSeed) external {
        (uint256 jobId, bool ok) = _job(jobSeed);
        if (!ok) return;
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        try escrow.expire(jobId) {
            if (block.timestamp < uint256(j.deadline) + j.grace) _mismatch("expired early");
            _creditFees(jobId, j);
            ghostRefunded[jobId] += j.remaining;
            ghostCredits[j.client][j.token] += j.remaining;
            _finish(jobId);
            calls["expire"]++;
            if (j.status == JobEscrow.Status.Drawing) calls["expireDrawing"]++;
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

    /// Time and blocks go by: mostly a few blocks, sometimes more than the 256 blocks a
    /// seed's hash is kept for.
    function warp(uint256 secondsAhead, uint256 blocks) external {
        vm.warp(block.timestamp + bound(secondsAhead, 1, 2 hours));
        vm.roll(block.number + (blocks % 6 == 0 ? 257 + blocks % 64 : 1 + blocks % 3));
        calls["warp"]++;
    }

    // ------------------------------------------------------------- helpers

    function _finish(uint256 jobId) internal {
        ghostExits[jobId] += 1;
        finishedSnapshot[jobId] = keccak256(abi.encode(escrow.getJob(jobId)));
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
        vm.roll(1_000);
        usdc = new TestUSDC();
        other = new TestUSDC();
        // an unbonding delay of 2 hours, so that runs reach withdrawStake
        escrow = new JobEscrow(IERC20(address(usdc)), 100e6, 2 hours, 7 days, 1 days, 10 minutes, 50e6);
        handler = new EscrowHandler(escrow, usdc, other);
        prober = new ExitProbe();
    }

    /// @dev forge finds this by name: only the handler is called at random.
    function targetContracts() public view returns (address[] memory targets) {
        targets = new address[](1);
        targets[0] = address(handler);
    }

    /// @dev The handler's own helpers are not actions.
    function excludeSelectors() public view returns (FuzzSelector[] memory out) {
        out = new FuzzSelector[](1);
        bytes4[] memory sels = new bytes4[](1);
        sels[0] = EscrowHandler.create.selector;
        out[0] = FuzzSelector(address(handler), sels);
    }

    struct FuzzSelector {
        address addr;
        bytes4[] selectors;
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
        _checkPool();
        EscrowHandler.GhostJob[] memory ghosts = new EscrowHandler.GhostJob[](n);
        for (uint256 id = 1; id <= n; ++id) {
            ghosts[id - 1] = handler.ghostJob(id);
        }
        uint256[] memory uncredited = _checkCommittees(jobs, ghosts);
        address[] memory all = handler.actors();
        _checkConservation(jobs, uncredited, all, address(usdc));
        _checkConservation(jobs, uncredited, all, address(other));
        _checkPerJob(jobs, ghosts);
        _checkPastDeadlineCanExit(jobs);
    }

    /// Every provider's bonded and unbonding stake is what the ghost book says; bonded ≥
    /// liveEpochs × minStake, so every slashing reject can take exactly minStake; live epochs
    /// per provider equal the jobs it holds, so Σ liveEpochs == the number of Assigned jobs;
    /// burned == Σ slashes, each exactly minStake, and slashes happen exactly on unanimous
    /// rejects.
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
        assertEq(handler.ghostSlashes(), handler.ghostUnanimousRejects(), "slashes only on unanimous rejects");
    }

    /// The pool holds exactly the verifiers with bonded ≥ minVerifierStake, each once; every
    /// verifier's stake is what the ghost book says.
    function _checkPool() internal view {
        address[] memory vs = handler.verifiers();
        uint256 pooledCount;
        for (uint256 i; i < vs.length; ++i) {
            (uint256 bonded, uint256 unbonding, uint64 at, bool pooled) = escrow.verifierStakeOf(vs[i]);
            assertEq(bonded, handler.ghostVBonded(vs[i]), "verifier bonded matches the ghost book");
            assertEq(unbonding, handler.ghostVUnbonding(vs[i]), "verifier unbonding matches the ghost book");
            assertTrue((unbonding == 0) == (at == 0), "verifier unbondAt set iff something unbonds");
            assertTrue(pooled == (bonded >= escrow.minVerifierStake()), "pooled iff bonded >= minVerifierStake");
            if (pooled) pooledCount++;
        }
        uint256 n = escrow.poolSize();
        assertEq(n, pooledCount, "pool size == pooled verifiers");
        for (uint256 i; i < n; ++i) {
            address a = escrow.poolAt(i);
            (,,, bool pooled) = escrow.verifierStakeOf(a);
            assertTrue(pooled, "a pool entry is pooled");
            for (uint256 k; k < i; ++k) {
                assertTrue(escrow.poolAt(k) != a, "a pool entry twice");
            }
        }
    }

    /// Every drawn committee has committeeSize distinct members, never the client; memberOf
    /// gives each its position; each member's paid count is the ghost's. Returns, per job, the
    /// fees charged and not yet credited (none once settled or expired).
    function _checkCommittees(JobEscrow.JobView[] memory jobs, EscrowHandler.GhostJob[] memory ghosts)
        internal
        view
        returns (uint256[] memory uncredited)
    {
        uncredited = new uint256[](jobs.length);
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            uint256 jobId = i + 1;
            bool drawn = j.status != JobEscrow.Status.Drawing && j.terms != bytes32(0);
            assertEq(j.committee.length, drawn ? j.committeeSize : 0, "committee size");
            uint256 charged;
            for (uint256 m; m < j.committee.length; ++m) {
                address a = j.committee[m];
                assertTrue(a != j.client, "the client on its own committee");
                (uint8 index, uint64 paid) = escrow.memberOf(jobId, a);
                assertEq(index, m + 1, "member index");
                assertEq(paid, handler.ghostMemberPaid(jobId, a), "paid count");
                charged += uint256(paid) * j.verifierFee;
            }
            EscrowHandler.GhostJob memory g = ghosts[i];
            assertEq(charged, g.feesCharged, "fees charged == sum of paid x fee");
            bool credited = j.settled || j.status == JobEscrow.Status.Expired;
            assertEq(g.feesCredited, credited ? charged : 0, "fees credited once, at settle or expire");
            if (!credited) uncredited[i] = charged;
        }
    }

    /// To the unit, per token: balance == Σremaining of unfinished and unsettled jobs + Σ fees
    /// charged and not credited yet + Σcredits + (stake token only) Σ provider stakes + Σ
    /// verifier stakes + burned; and == what came in − what went out. Every credit matches the
    /// ghost book.
    function _checkConservation(
        JobEscrow.JobView[] memory jobs,
        uint256[] memory uncredited,
        address[] memory all,
        address t
    ) internal view {
        uint256 owed;
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            if (j.token != t) continue;
            if (j.status == JobEscrow.Status.Expired || j.settled) {
                assertEq(j.remaining, 0, "an exited job keeps nothing");
            }
            owed += j.remaining + uncredited[i];
        }
        if (t == address(usdc)) {
            address[] memory ps = handler.providers();
            for (uint256 p; p < ps.length; ++p) {
                (uint256 bonded, uint256 unbonding,,) = escrow.stakeOf(ps[p]);
                owed += bonded + unbonding;
            }
            address[] memory vs = handler.verifiers();
            for (uint256 v; v < vs.length; ++v) {
                (uint256 bonded, uint256 unbonding,,) = escrow.verifierStakeOf(vs[v]);
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

    /// Per job: paid + fees + refunded + remaining == deposited; a live job's remaining covers
    /// every step left at the maximum price and every fee left; a job exits at most once and
    /// is settled at most once; a finished job changes only by its one settle.
    function _checkPerJob(JobEscrow.JobView[] memory jobs, EscrowHandler.GhostJob[] memory ghosts) internal pure {
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            EscrowHandler.GhostJob memory g = ghosts[i];
            assertEq(j.deposit, g.deposited, "deposit");
            assertEq(g.paid + g.feesCharged + g.refunded + j.remaining, j.deposit, "conservation");
            bool live = j.status == JobEscrow.Status.Drawing || j.status == JobEscrow.Status.Open
                || j.status == JobEscrow.Status.Assigned;
            if (live) {
                assertTrue(j.remaining >= reserve(j, j.lastAcceptedStep), "remaining below the reserve");
            }
            assertTrue(g.exits <= 1, "job exited twice");
            assertTrue(g.settles <= 1, "job settled twice");
            bool finished = j.status == JobEscrow.Status.Completed || j.status == JobEscrow.Status.Expired;
            assertEq(g.exits, finished ? 1 : 0, "exit recorded iff finished");
            assertTrue(j.settled == (g.settles == 1), "settled flag iff settled once");
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

    /// Any job past deadline + grace that has not finished (drawing included) can be expired,
    /// and any completed job not yet settled can be settled; either way its client can be paid.
    function _checkPastDeadlineCanExit(JobEscrow.JobView[] memory jobs) internal {
        for (uint256 i; i < jobs.length; ++i) {
            JobEscrow.JobView memory j = jobs[i];
            bool live = j.status == JobEscrow.Status.Drawing || j.status == JobEscrow.Status.Open
                || j.status == JobEscrow.Status.Assigned;
            bool settleable = j.status == JobEscrow.Status.Completed && !j.settled;
            if (!settleable && (!live || block.timestamp < uint256(j.deadline) + j.grace)) continue;
            try prober.probe(escrow, i + 1, settleable) {
                assertTrue(false, "probe returned");
            } catch (bytes memory reason) {
                assertEq(reason, abi.encodeWithSelector(ExitProbe.Outcome.selector, true, true), "job cannot exit");
            }
        }
    }
}
