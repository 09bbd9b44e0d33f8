// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Base} from "./Base.sol";
import {JobEscrow} from "../../src/JobEscrow.sol";
import {TestUSDC} from "../../src/TestUSDC.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

/// @dev A deployed escrow with funded, keyed actors and helpers that sign like the node will.
abstract contract EscrowFixture is Base {
    uint256 internal constant MIN_STAKE = 100e6;
    uint64 internal constant UNBOND_DELAY = 7 days;
    uint64 internal constant DEADLINE_IN = 1 days;
    uint64 internal constant GRACE = 1 hours;
    uint64 internal constant MAX_DURATION = 30 days;
    uint64 internal constant MAX_GRACE = 1 days;

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
    }

    function _deploy() internal returns (JobEscrow) {
        return new JobEscrow(IERC20(address(usdc)), MIN_STAKE, UNBOND_DELAY, MAX_DURATION, MAX_GRACE);
    }

    function _fund(address who, uint256 amount) internal {
        usdc.mint(who, amount);
        vm.prank(who);
        usdc.approve(address(escrow), type(uint256).max);
    }

    function _verifiers() internal view returns (address[] memory vs) {
        vs = new address[](3);
        vs[0] = v1;
        vs[1] = v2;
        vs[2] = v3;
    }

    function _createJob(uint256 budget, uint256 maxPrice, uint64 totalSteps, uint64 interval)
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
            _verifiers(),
            2,
            uint64(block.timestamp) + DEADLINE_IN,
            GRACE
        );
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

    /// @dev The terms hash computed here from the creation arguments, independently of the escrow.
    function _expectedTerms(
        address client_,
        address token,
        uint256 budget,
        uint256 maxPrice,
        uint64 totalSteps,
        uint64 interval,
        bytes32 specHash,
        address[] memory vs,
        uint8 quorum,
        uint64 deadline,
        uint64 grace
    ) internal pure returns (bytes32) {
        bytes memory packed;
        for (uint256 i; i < vs.length; ++i) {
            packed = bytes.concat(packed, bytes32(uint256(uint160(vs[i]))));
        }
        return keccak256(
            bytes.concat(
                abi.encode(client_, token, budget, maxPrice, totalSteps, interval),
                abi.encode(specHash, keccak256(packed), quorum, deadline, grace)
            )
        );
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

    function _quorumVotes(uint256 jobId, uint64 epoch, uint64 step, bytes32 hash, bool accept)
        internal
        view
        returns (bytes[] memory)
    {
        return _votes(jobId, epoch, step, hash, accept, _pks(V1_PK, V2_PK));
    }

    function _accept(uint256 jobId, uint64 step, bytes32 hash) internal {
        uint64 epoch = _currentEpoch(jobId);
        escrow.acceptCheckpoint(jobId, epoch, step, hash, _quorumVotes(jobId, epoch, step, hash, true));
    }

    function _ckpt(uint64 step) internal pure returns (bytes32) {
        return keccak256(abi.encode("checkpoint", step));
    }
}
