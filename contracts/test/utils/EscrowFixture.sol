// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Base} from "./Base.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {TestUSDC} from "../../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev A deployed escrow with funded, keyed actors and helpers that sign like the node will.
///      Three verifiers (v1, v2, v3) are staked in the pool, so a default job's committee of
///      three is exactly them, in the order the draw picks.
abstract contract EscrowFixture is Base {
    uint256 internal constant MIN_STAKE = 100e6;
    uint256 internal constant MIN_VERIFIER_STAKE = 50e6;
    uint64 internal constant UNBOND_DELAY = 7 days;
    uint64 internal constant DEADLINE_IN = 1 days;
    uint64 internal constant GRACE = 1 hours;
    uint64 internal constant MAX_DURATION = 30 days;
    uint64 internal constant MAX_GRACE = 1 days;
    uint64 internal constant DECISION_WINDOW = 10 minutes;
    /// @dev What each signer of a decision earns on the fixture's jobs.
    uint256 internal constant FEE = 1_000;
    uint8 internal constant COMMITTEE = 3;
    uint8 internal constant QUORUM = 2;

    uint256 internal constant CLIENT_PK = 0xC11E47;
    uint256 internal constant PROVIDER_PK = 0xA1;
    uint256 internal constant PROVIDER2_PK = 0xA2;
    uint256 internal constant V1_PK = 0xB1;
    uint256 internal constant V2_PK = 0xB2;
    uint256 internal constant V3_PK = 0xB3;
    uint256 internal constant OUTSIDER_PK = 0xE1;

    TestUSDC internal usdc;
    JobEscrow internal escrow;
    address internal client;
    address internal provider;
    address internal provider2;
    address internal v1;
    address internal v2;
    address internal v3;
    address internal outsider;

    function setUp() public virtual {
        vm.warp(1_800_000_000);
        vm.roll(100);
        usdc = new TestUSDC();
        escrow = _deploy();
        client = vm.addr(CLIENT_PK);
        provider = vm.addr(PROVIDER_PK);
        provider2 = vm.addr(PROVIDER2_PK);
        v1 = vm.addr(V1_PK);
        v2 = vm.addr(V2_PK);
        v3 = vm.addr(V3_PK);
        outsider = vm.addr(OUTSIDER_PK);
        _fund(client, 1_000_000e6);
        _fund(provider, 1_000e6);
        _fund(provider2, 1_000e6);
        _stakeVerifier(v1, MIN_VERIFIER_STAKE);
        _stakeVerifier(v2, MIN_VERIFIER_STAKE);
        _stakeVerifier(v3, MIN_VERIFIER_STAKE);
    }

    function _deploy() internal returns (JobEscrow) {
        return new JobEscrow(
            IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY, MAX_DURATION, MAX_GRACE, DECISION_WINDOW, MIN_VERIFIER_STAKE
        );
    }

    function _fund(address who, uint256 amount) internal {
        usdc.mint(who, amount);
        vm.prank(who);
        usdc.approve(address(escrow), type(uint256).max);
    }

    /// @dev Mints, approves and stakes `amount` as verifier stake for `who`.
    function _stakeVerifier(address who, uint256 amount) internal {
        _fund(who, amount);
        vm.prank(who);
        escrow.registerVerifier(amount);
    }

    function _verifiers() internal view returns (address[] memory vs) {
        vs = new address[](3);
        vs[0] = v1;
        vs[1] = v2;
        vs[2] = v3;
    }

    /// @dev Creates a job with the fixture's committee shape and fee, and draws it.
    function _createJob(uint256 budget, uint256 maxPrice, uint64 totalSteps, uint64 interval)
        internal
        returns (uint256 jobId)
    {
        jobId = _createUndrawn(budget, maxPrice, totalSteps, interval);
        _draw(jobId);
    }

    function _createUndrawn(uint256 budget, uint256 maxPrice, uint64 totalSteps, uint64 interval)
        internal
        returns (uint256 jobId)
    {
        vm.prank(client);
        jobId = escrow.createJob(
            IERC20(address(usdc)),
            budget,
            maxPrice,
            totalSteps,
            interval,
            keccak256("spec"),
            COMMITTEE,
            QUORUM,
            FEE,
            uint64(block.timestamp) + DEADLINE_IN,
            GRACE
        );
    }

    /// @dev Moves to the next block and draws the job's committee.
    function _draw(uint256 jobId) internal {
        vm.roll(block.number + 1);
        escrow.drawCommittee(jobId);
    }

    /// @dev The demo's shape: 400 steps, checkpoints every 50, 0.001 USDC a step at most, 5 USDC budget.
    function _defaultJob() internal returns (uint256) {
        return _createJob(5e6, 10_000, 400, 50);
    }

    function _register(address who, uint256 amount) internal {
        vm.prank(who);
        escrow.register(amount);
    }

    /// @dev A bid over the job's stored terms, as an honest provider signs after reading the job.
    function _bidSig(uint256 pk, uint256 jobId, uint64 epoch, uint256 price, uint64 expiry)
        internal
        view
        returns (bytes memory)
    {
        return _bidSigOver(pk, jobId, escrow.termsOf(jobId), epoch, price, expiry);
    }

    function _bidSigOver(uint256 pk, uint256 jobId, bytes32 terms, uint64 epoch, uint256 price, uint64 expiry)
        internal
        view
        returns (bytes memory)
    {
        return signDigest(pk, escrow.hashBid(jobId, terms, epoch, vm.addr(pk), price, expiry));
    }

    struct TermsInput {
        address client;
        address token;
        uint256 budget;
        uint256 maxPrice;
        uint64 totalSteps;
        uint64 interval;
        bytes32 specHash;
        address[] committee;
        uint8 quorum;
        uint256 fee;
        uint64 deadline;
        uint64 grace;
    }

    /// @dev The terms hash computed here from the creation arguments and the committee,
    ///      independently of the escrow's encoder: word by word.
    function _expectedTerms(TermsInput memory t) internal pure returns (bytes32) {
        bytes memory packed;
        for (uint256 i; i < t.committee.length; ++i) {
            packed = bytes.concat(packed, bytes32(uint256(uint160(t.committee[i]))));
        }
        return keccak256(
            bytes.concat(
                bytes.concat(
                    bytes32(uint256(uint160(t.client))),
                    bytes32(uint256(uint160(t.token))),
                    bytes32(t.budget),
                    bytes32(t.maxPrice),
                    bytes32(uint256(t.totalSteps)),
                    bytes32(uint256(t.interval))
                ),
                bytes.concat(
                    t.specHash,
                    keccak256(packed),
                    bytes32(uint256(t.quorum)),
                    bytes32(t.fee),
                    bytes32(uint256(t.deadline)),
                    bytes32(uint256(t.grace))
                )
            )
        );
    }

    /// @dev The fixture job's terms input, for the committee the escrow drew.
    function _defaultTerms(uint256 jobId) internal view returns (TermsInput memory t) {
        JobEscrow.JobView memory j = escrow.getJob(jobId);
        t.client = client;
        t.token = address(usdc);
        t.budget = 5e6;
        t.maxPrice = 10_000;
        t.totalSteps = 400;
        t.interval = 50;
        t.specHash = keccak256("spec");
        t.committee = j.committee;
        t.quorum = QUORUM;
        t.fee = FEE;
        t.deadline = j.deadline;
        t.grace = GRACE;
    }

    /// @dev The draw, computed here from the spec's text over a copy of the pool: the seed,
    ///      then for each seat a keccak index probed forward past the client and the taken.
    function _expectedCommittee(bytes32 seedHash, uint256 jobId, address[] memory pool, address client_, uint256 size)
        internal
        pure
        returns (address[] memory committee)
    {
        committee = new address[](size);
        bytes32 seed = keccak256(bytes.concat(seedHash, bytes32(jobId)));
        for (uint256 i; i < size; ++i) {
            uint256 idx = uint256(keccak256(bytes.concat(seed, bytes32(i)))) % pool.length;
            while (pool[idx] == client_ || _contains(committee, pool[idx])) {
                idx = (idx + 1) % pool.length;
            }
            committee[i] = pool[idx];
        }
    }

    function _contains(address[] memory list, address a) internal pure returns (bool) {
        for (uint256 i; i < list.length; ++i) {
            if (list[i] == a) return true;
        }
        return false;
    }

    /// @dev The pool as the escrow holds it now, in order.
    function _pool() internal view returns (address[] memory pool) {
        pool = new address[](escrow.poolSize());
        for (uint256 i; i < pool.length; ++i) {
            pool[i] = escrow.poolAt(i);
        }
    }

    function _currentEpoch(uint256 jobId) internal view returns (uint64) {
        return escrow.getJob(jobId).epoch;
    }

    function _assign(uint256 jobId, uint256 pk, uint256 price) internal {
        uint64 expiry = uint64(block.timestamp) + 600;
        bytes memory sig = _bidSig(pk, jobId, _currentEpoch(jobId) + 1, price, expiry);
        vm.prank(client);
        escrow.assign(jobId, vm.addr(pk), price, expiry, sig);
    }

    function _votes(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept, uint256[] memory pks)
        internal
        view
        returns (bytes[] memory sigs)
    {
        bytes32 digest = escrow.hashVote(jobId, epoch, step, hash, accept);
        sigs = new bytes[](pks.length);
        for (uint256 i; i < pks.length; ++i) {
            sigs[i] = signDigest(pks[i], digest);
        }
    }

    function _pks(uint256 a, uint256 b) internal pure returns (uint256[] memory pks) {
        pks = new uint256[](2);
        pks[0] = a;
        pks[1] = b;
    }

    function _pks(uint256 a, uint256 b, uint256 c) internal pure returns (uint256[] memory pks) {
        pks = new uint256[](3);
        pks[0] = a;
        pks[1] = b;
        pks[2] = c;
    }

    function _quorumVotes(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept)
        internal
        view
        returns (bytes[] memory)
    {
        return _votes(jobId, epoch, step, hash, accept, _pks(V1_PK, V2_PK));
    }

    /// @dev Votes from the whole fixture committee: a unanimous decision.
    function _allVotes(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept)
        internal
        view
        returns (bytes[] memory)
    {
        return _votes(jobId, epoch, step, hash, accept, _pks(V1_PK, V2_PK, V3_PK));
    }

    /// @dev The `voters` bit set of the given members on the job.
    function _bits(uint256 jobId, address[] memory signers) internal view returns (uint256 voters) {
        for (uint256 i; i < signers.length; ++i) {
            (uint8 index,) = escrow.memberOf(jobId, signers[i]);
            require(index != 0, "not a member");
            voters |= 1 << (index - 1);
        }
    }

    function _bits(uint256 jobId, address a, address b) internal view returns (uint256) {
        address[] memory s = new address[](2);
        s[0] = a;
        s[1] = b;
        return _bits(jobId, s);
    }

    function _paid(uint256 jobId, address member) internal view returns (uint256 paid) {
        (, paid) = escrow.memberOf(jobId, member);
    }

    function _accept(uint256 jobId, uint64 step, bytes32 hash) internal {
        uint64 epoch = _currentEpoch(jobId);
        escrow.acceptCheckpoint(jobId, epoch, step, hash, _quorumVotes(jobId, epoch, step, hash, true));
    }

    function _ckpt(uint64 step) internal pure returns (bytes32) {
        return keccak256(abi.encode("checkpoint", step));
    }
}
