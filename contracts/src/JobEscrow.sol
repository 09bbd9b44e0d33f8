// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title JobEscrow
/// @notice Escrow for fine-tuning jobs run on untrusted providers, checked by staked verifiers
///         that the escrow draws. A client locks a budget that covers every step at its
///         maximum price and every verifier fee; the escrow draws the job's committee from the
///         pool of staked verifiers with the hash of the job's creation block, read in a later
///         block; the client assigns providers in numbered epochs (the fencing token: only the
///         current epoch's checkpoints can be paid), and a quorum of the committee accepts or
///         rejects each checkpoint with EIP-712 votes. Accepted steps are paid at the assigned
///         price; every member that signed a decision earns `verifierFee` (credited when the
///         job is settled or expired). A rejecting quorum ends the epoch; only a reject signed
///         by the whole committee slashes `minStake` of the provider's stake, which is burned:
///         it stays in this contract for good and is credited to no one, so nobody who can
///         cause a reject can profit from one. Every payment is pull-based (`withdraw`), and
///         every job can be exited: after completion anyone may `settle` it once, and after
///         `deadline + grace` anyone may `expire` it.
/// @dev    Rules that bound what a client can do to a provider, and a provider to a client:
///         - the client chooses the committee's size (2..32) and a strict-majority quorum, never
///           its members: they are drawn by `drawCommittee` from `blockhash(seedBlock)` (the
///           creation block, read in a later block) over the verifier pool as it was at the end
///           of that block, the client excluded, so once the seed block is mined nobody can
///           choose the result (changing the pool first only moves the seed to a later block);
///           a job cannot be cancelled while drawing, so a client cannot re-roll it for free;
///           an accepting and a rejecting quorum always share a member;
///         - a provider is never on its job's committee;
///         - a reject slashes only when every committee member signed it, so a single honest
///           member keeps an honest provider's stake whole, whoever else the draw picked;
///         - fees are taken from the job's budget as decisions land; a reject pays them only
///           from the slack above what the rest of the job can cost, so `remaining` always
///           covers every remaining step at the maximum price and every remaining accept's fees;
///         - `deadline` is at most `maxDuration` ahead and `grace` at most `maxGrace`, so stake
///           and budget are never locked for longer than the deployer allows;
///         - a provider's stake is reserved per live epoch: holding n epochs needs n ×
///           `minStake` bonded, so every slashing reject can take exactly `minStake`, and only
///           the part above the reservation can be unbonded;
///         - a provider may `resign` its live epoch at any time without a slash (its unaccepted
///           work is unpaid), so it is never stuck behind a client that never decides;
///         - each bid signs the job's `terms` (a hash of everything the client fixed at creation
///           and the drawn committee), so a bid is only good for the job its provider read;
///         - when the client ends an epoch, a quorum's accept of that epoch's next checkpoint
///           still lands for `decisionWindow`, so verified work can't be made unpaid by ending
///           the epoch first; fencing holds otherwise (no rejects, no later checkpoints).
///         Amounts are stored in 96 bits (jobs: budget, prices, fee, remaining) and 128 bits
///         (stakes); larger ones are refused with `AmountTooLarge`.
contract JobEscrow is ReentrancyGuardTransient, EIP712 {
    using SafeERC20 for IERC20;

    // ---------------------------------------------------------------- types

    enum Status {
        None,
        Open, // no provider holds the job; the client may assign one
        Assigned, // a provider holds the current epoch
        Completed, // the last step was accepted; `settle` credits the fees and what is left
        Expired, // exited after deadline + grace
        Drawing // created; its committee is not drawn yet (`drawCommittee`)
    }

    /// @notice Why an epoch ended (the `reason` of `EpochEnded`).
    enum EndReason {
        Replaced, // the client assigned another provider (or the same one, with a new bid)
        Released, // the client ended it without a replacement
        Rejected, // a quorum rejected one of its checkpoints
        Completed, // its checkpoint finished the job
        Expired, // the job expired while it was live
        Resigned, // its provider gave it up
        Superseded // a late accept of an epoch the client ended moved the job past its start
    }

    /// @dev Packed for `acceptCheckpoint`, the call a job makes most: it reads slots 0-3
    ///      only and writes slot 0 (step, remaining and, on the final step, status) and slot 4
    ///      (the checkpoint hash). Amounts are 96 bits so that the step, the budget left, the
    ///      epoch and the status share the slot an accept writes, and the price and the fee
    ///      share the slots of the payee and the token.
    struct Job {
        // slot 0: what a decision checks and writes
        uint64 lastAcceptedStep;
        uint96 remaining;
        uint64 epoch;
        Status status;
        uint8 quorum;
        uint8 committeeSize;
        bool settled;
        // slot 1: the payee
        address provider;
        uint96 pricePerStep;
        // slot 2
        address token;
        uint96 verifierFee;
        // slot 3
        uint64 totalSteps;
        uint64 checkpointInterval;
        uint64 deadline;
        uint64 grace;
        // slot 4
        bytes32 lastCheckpointHash;
        // slot 5
        address client;
        uint64 seedBlock;
        // slot 6
        uint96 maxPricePerStep;
        uint96 deposit;
        // slot 7
        bytes32 specHash;
        // slot 8
        bytes32 terms;
        // slot 9
        address[] committee;
    }

    /// @notice A job as `getJob` returns it. `remaining` is the budget not yet paid, charged as
    ///         fees nor refunded (after completion: the refund `settle` will credit); `deposit`
    ///         the budget pulled at creation; `lastCheckpointHash` is the last accepted
    ///         checkpoint, or `specHash` before any; `committee` is empty and `terms` zero
    ///         until the draw; `settled` is set by `settle` only.
    struct JobView {
        address client;
        address token;
        Status status;
        uint64 epoch;
        address provider;
        uint256 pricePerStep;
        uint256 maxPricePerStep;
        uint256 deposit;
        uint256 remaining;
        uint64 totalSteps;
        uint64 checkpointInterval;
        uint64 lastAcceptedStep;
        bytes32 lastCheckpointHash;
        bytes32 specHash;
        address[] committee;
        uint8 committeeSize;
        uint8 quorum;
        uint256 verifierFee;
        uint64 seedBlock;
        uint64 deadline;
        uint64 grace;
        bool settled;
        bytes32 terms;
    }

    /// @dev A job's committee member: its 1-based position in the committee (0: not a member)
    ///      and the decisions it earned a fee for. One slot, read by every signature check
    ///      anyway, so counting a fee costs a warm write.
    struct Member {
        uint8 index;
        uint64 paid;
    }

    /// @dev `bonded` backs live epochs and can be slashed; `unbonding` cannot be slashed nor
    ///      reserved and is paid out from `unbondAt` on. `unbondAt` and `liveEpochs` share a
    ///      slot that is zero when a provider holds nothing and unbonds nothing, so ending its
    ///      last epoch clears the slot (a gas refund on the final accept).
    struct Stake {
        // slot 0
        uint128 bonded;
        uint128 unbonding;
        // slot 1
        uint64 unbondAt; // 0 while nothing is unbonding
        uint32 liveEpochs; // epochs this provider currently holds, across jobs
    }

    /// @dev A verifier's stake: never slashed nor reserved. `poolIndex` is its 1-based place
    ///      in the pool, 0 while it is not pooled (bonded below `minVerifierStake`).
    struct VerifierStake {
        // slot 0
        uint128 bonded;
        uint128 unbonding;
        // slot 1
        uint64 unbondAt; // 0 while nothing is unbonding
        uint64 poolIndex;
    }

    /// @dev An epoch the client ended (replaced or released), kept for `decisionWindow` so a
    ///      quorum's accept of its next checkpoint still pays its provider. `stepAtEnd` is the
    ///      job's head when it ended: the record is good only while the head is still there,
    ///      because the checkpoint it pays must extend exactly that head.
    struct Closed {
        // slot 0
        address provider;
        uint96 pricePerStep;
        // slot 1
        uint64 stepAtEnd;
        uint64 windowEnd;
    }

    // ------------------------------------------------------------ constants

    bytes32 public constant BID_TYPEHASH = keccak256(
        "Bid(uint256 jobId,bytes32 terms,uint64 epoch,address provider,uint256 pricePerStep,uint64 expiry)"
    );
    bytes32 public constant VOTE_TYPEHASH =
        keccak256("Vote(uint256 jobId,uint64 epoch,uint64 step,bytes32 checkpointHash,bool accept)");

    /// @notice Bound on a job's committee (and on the signatures a decision carries): `voters`
    ///         is a bit set over committee positions.
    uint256 public constant MAX_VERIFIERS = 32;

    // ---------------------------------------------------------------- state

    /// @notice The token every provider and verifier stakes in.
    IERC20 public immutable stakeToken;
    /// @notice Stake reserved per live epoch, and what one unanimous reject slashes.
    uint256 public immutable minStake;
    /// @notice Seconds between the last unbonding request and the withdrawal, for providers
    ///         and verifiers alike.
    uint64 public immutable unbondDelay;
    /// @notice The furthest ahead of its creation a job's deadline may be, in seconds.
    uint64 public immutable maxDuration;
    /// @notice The longest grace a job may have after its deadline, in seconds.
    uint64 public immutable maxGrace;
    /// @notice Seconds after the client ends an epoch during which a quorum's accept of that
    ///         epoch's next checkpoint still lands and is paid.
    uint64 public immutable decisionWindow;
    /// @notice The bonded verifier stake that puts an account in the pool committees are
    ///         drawn from.
    uint256 public immutable minVerifierStake;

    uint256 public jobCount;
    /// @notice Stake slashed so far. It stays in this contract for good: no function pays it out.
    uint256 public burned;
    /// @notice The block in which an account last joined or left the verifier pool. A draw
    ///         takes the pool as it was at the end of its seed block: when the pool changed in
    ///         a later block, the seed moves instead (see `drawCommittee`).
    uint64 public poolChangedAt;
    mapping(uint256 jobId => Job) private _jobs;
    mapping(uint256 jobId => mapping(address account => Member)) private _members;
    mapping(address provider => Stake) private _stakes;
    mapping(address verifier => VerifierStake) private _verifierStakes;
    address[] private _pool;
    mapping(uint256 jobId => mapping(uint64 epoch => Closed)) private _closed;
    mapping(address account => mapping(address token => uint256)) private _withdrawable;

    // --------------------------------------------------------------- events

    /// @notice A job was opened and its budget escrowed; its committee is drawn from
    ///         `blockhash(seedBlock)` by `drawCommittee` in a later block.
    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed token,
        uint256 budget,
        uint256 maxPricePerStep,
        uint64 totalSteps,
        uint64 checkpointInterval,
        bytes32 specHash,
        uint8 committeeSize,
        uint8 quorum,
        uint256 verifierFee,
        uint64 deadline,
        uint64 grace,
        uint64 seedBlock
    );
    /// @notice The seed block's hash was out of reach (over 256 blocks old), or the pool
    ///         changed after the seed block: the draw now takes the hash of `seedBlock`, the
    ///         block this was emitted in, and the pool as it is at the end of that block.
    event CommitteeSeedMoved(uint256 indexed jobId, uint64 seedBlock);
    /// @notice The job's committee, in draw order (bit i of `voters` is `committee[i]`), and
    ///         the terms every bid for it signs. The job is open.
    event CommitteeDrawn(uint256 indexed jobId, address[] committee, bytes32 terms);
    /// @notice Epoch `epoch` began: `provider` trains from `startStep` and `startCheckpoint` (the
    ///         last accepted checkpoint, or the job's `specHash` before any). Providers act on this.
    event ProviderAssigned(
        uint256 indexed jobId,
        uint64 indexed epoch,
        address indexed provider,
        uint256 pricePerStep,
        uint64 startStep,
        bytes32 startCheckpoint
    );
    /// @notice The epoch is over; checkpoints of it can no longer be rejected, nor accepted
    ///         (but for the next one, within `decisionWindow`, when the client ended it).
    event EpochEnded(uint256 indexed jobId, uint64 indexed epoch, EndReason reason);
    /// @notice A quorum accepted `step`; `amount` was credited to `provider`, and each member
    ///         in `voters` (bit i: `committee[i]` signed) earned the fee (`fees` in all).
    event CheckpointAccepted(
        uint256 indexed jobId,
        uint64 indexed epoch,
        uint64 step,
        bytes32 checkpointHash,
        address indexed provider,
        uint256 amount,
        uint256 voters,
        uint256 fees
    );
    /// @notice A quorum rejected `step`; the epoch ends, `slashed` stake is burned (non-zero
    ///         only when `voters` is the whole committee), and the signers earned `fees` in all
    ///         (zero when the budget had no slack for them).
    event CheckpointRejected(
        uint256 indexed jobId,
        uint64 indexed epoch,
        uint64 step,
        bytes32 checkpointHash,
        address indexed provider,
        uint256 slashed,
        uint256 voters,
        uint256 fees
    );
    /// @notice The final step was accepted; `refund` is left for `settle` to credit to the client.
    event JobCompleted(uint256 indexed jobId, uint256 refund);
    /// @notice The completed job's `refund` was credited to `client` (after its fees).
    event JobSettled(uint256 indexed jobId, address indexed client, uint256 refund);
    /// @notice The job was exited after deadline + grace; `refund` was credited to the client.
    event JobExpired(uint256 indexed jobId, uint256 refund);
    /// @notice The fees `verifier` earned on the job (`paid × verifierFee`) were credited to it.
    event FeesCredited(uint256 indexed jobId, address indexed verifier, uint256 amount);
    /// @notice `provider` added `amount` to its bonded stake, now `totalBonded`.
    event Staked(address indexed provider, uint256 amount, uint256 totalBonded);
    /// @notice `provider` moved `amount` of bonded stake to unbonding; everything it has
    ///         unbonding can be withdrawn from `availableAt` on.
    event UnbondRequested(address indexed provider, uint256 amount, uint64 availableAt);
    /// @notice `provider` took its unbonded stake back.
    event StakeWithdrawn(address indexed provider, uint256 amount);
    /// @notice `amount` of `provider`'s stake was burned for a unanimously rejected epoch of `jobId`.
    event Slashed(address indexed provider, uint256 indexed jobId, uint256 amount);
    /// @notice `verifier` added `amount` to its bonded verifier stake, now `totalBonded`.
    event VerifierStaked(address indexed verifier, uint256 amount, uint256 totalBonded);
    /// @notice `verifier` moved `amount` of bonded verifier stake to unbonding; everything it
    ///         has unbonding can be withdrawn from `availableAt` on.
    event VerifierUnbondRequested(address indexed verifier, uint256 amount, uint64 availableAt);
    /// @notice `verifier` took its unbonded verifier stake back.
    event VerifierStakeWithdrawn(address indexed verifier, uint256 amount);
    /// @notice `account` withdrew `amount` of `token` credited to it.
    event Withdrawn(address indexed account, address indexed token, uint256 amount);

    // --------------------------------------------------------------- errors

    error ZeroAddress();
    error ZeroAmount();
    error AmountTooLarge();
    error InvalidSteps();
    error InvalidVerifiers();
    error InvalidQuorum();
    error DeadlinePassed();
    error DeadlineTooFar(uint64 deadline, uint256 latest);
    error GraceTooLong(uint64 grace, uint64 maxGrace);
    error BudgetTooSmall(uint256 budget, uint256 needed);
    error NotEnoughVerifiers(uint256 available, uint256 needed);
    error SeedNotMined(uint64 seedBlock);
    error DepositMismatch(uint256 received, uint256 expected);
    error UnknownJob(uint256 jobId);
    error NotClient();
    error NotProvider();
    error WrongStatus(Status status);
    error WrongEpoch(uint64 given, uint64 current);
    error BidExpired(uint64 expiry);
    error PriceTooHigh(uint256 price, uint256 maxPrice);
    error ProviderIsVerifier(address provider);
    error InsufficientStake(uint256 bonded, uint256 needed);
    error BadSignature(uint256 index);
    error WrongSigner(address recovered, address expected);
    error NotVerifier(address signer);
    error DuplicateSigner(address signer);
    error TooManySignatures();
    error QuorumNotReached(uint256 have, uint256 need);
    error StepNotIncreasing(uint64 step, uint64 lastAccepted);
    error StepOffInterval(uint64 step);
    error TooLate();
    error TooEarly(uint256 allowedAt);
    error StakeLocked(uint256 free, uint256 requested);
    error NotUnbonding();
    error NothingToSettle();
    error NothingToWithdraw();
    error WindowClosed(uint64 windowEnd);
    error MovedOn(uint64 lastAccepted, uint64 stepAtEnd);
    error BeyondNextCheckpoint(uint64 step);

    // ---------------------------------------------------------- constructor

    /// @param maxDuration_ must be non-zero, like `minStake_` and `minVerifierStake_`;
    ///        `maxGrace_` may be zero (no grace at all), and `decisionWindow_` zero (a late
    ///        accept only in the block that ended the epoch).
    constructor(
        IERC20 stakeToken_,
        uint256 minStake_,
        uint64 unbondDelay_,
        uint64 maxDuration_,
        uint64 maxGrace_,
        uint64 decisionWindow_,
        uint256 minVerifierStake_
    ) EIP712("GpuChain JobEscrow", "1") {
        if (address(stakeToken_) == address(0)) revert ZeroAddress();
        if (minStake_ == 0 || maxDuration_ == 0 || minVerifierStake_ == 0) revert ZeroAmount();
        stakeToken = stakeToken_;
        minStake = minStake_;
        unbondDelay = unbondDelay_;
        maxDuration = maxDuration_;
        maxGrace = maxGrace_;
        decisionWindow = decisionWindow_;
        minVerifierStake = minVerifierStake_;
    }

    // ----------------------------------------------------------------- jobs

    /// @notice Opens a job and pulls `budget` of `token` from the caller (approve first). The
    ///         budget must cover every step at the maximum price and a fee for every committee
    ///         member on every checkpoint, so no accept is ever short of funds. The job starts
    ///         in `Drawing`: its committee is drawn by `drawCommittee` in a later block.
    /// @param committeeSize 2..32 members, drawn from the verifier pool; the pool must hold at
    ///        least that many accounts other than the caller.
    /// @param quorum    a strict majority of the committee must sign each decision, so two
    ///        disjoint quorums (one accepting, one rejecting) cannot both exist.
    /// @param verifierFee what each signer of a decision earns (may be zero).
    /// @param deadline  in the future and at most `maxDuration` ahead; no assignment after it.
    /// @param grace     at most `maxGrace`; `expire` is open from `deadline + grace`.
    function createJob(
        IERC20 token,
        uint256 budget,
        uint256 maxPricePerStep,
        uint64 totalSteps,
        uint64 checkpointInterval,
        bytes32 specHash,
        uint8 committeeSize,
        uint8 quorum,
        uint256 verifierFee,
        uint64 deadline,
        uint64 grace
    ) external nonReentrant returns (uint256 jobId) {
        if (address(token) == address(0)) revert ZeroAddress();
        if (budget == 0 || maxPricePerStep == 0) revert ZeroAmount();
        if (budget > type(uint96).max || maxPricePerStep > type(uint96).max || verifierFee > type(uint96).max) {
            revert AmountTooLarge();
        }
        if (totalSteps == 0 || checkpointInterval == 0 || checkpointInterval > totalSteps) revert InvalidSteps();
        if (committeeSize < 2 || committeeSize > MAX_VERIFIERS) revert InvalidVerifiers();
        if (uint256(quorum) * 2 <= committeeSize || quorum > committeeSize) revert InvalidQuorum();
        if (deadline <= block.timestamp) revert DeadlinePassed();
        if (deadline > block.timestamp + maxDuration) revert DeadlineTooFar(deadline, block.timestamp + maxDuration);
        if (grace > maxGrace) revert GraceTooLong(grace, maxGrace);
        _checkBudget(budget, maxPricePerStep, totalSteps, checkpointInterval, committeeSize, verifierFee);
        _checkPool(msg.sender, committeeSize);

        jobId = ++jobCount;
        Job storage job = _jobs[jobId];
        job.remaining = uint96(budget);
        job.status = Status.Drawing;
        job.quorum = quorum;
        job.committeeSize = committeeSize;
        job.token = address(token);
        job.verifierFee = uint96(verifierFee);
        job.totalSteps = totalSteps;
        job.checkpointInterval = checkpointInterval;
        job.deadline = deadline;
        job.grace = grace;
        // The checkpoint chain is rooted at the spec (which names the base weights): epoch 1
        // starts from it, and the first accepted checkpoint overwrites a non-zero slot, which
        // keeps that acceptCheckpoint about 17k gas cheaper.
        job.lastCheckpointHash = specHash;
        job.client = msg.sender;
        job.seedBlock = uint64(block.number);
        job.maxPricePerStep = uint96(maxPricePerStep);
        job.deposit = uint96(budget);
        job.specHash = specHash;
        _emitCreated(jobId, job);

        _pullExact(token, budget);
    }

    /// @notice Anyone, in a block after the job's `seedBlock`: draws the committee with
    ///         `blockhash(seedBlock)` from the verifier pool as it was at the end of the seed
    ///         block, fixes the job's `terms` and opens it. The result is fixed once the seed
    ///         block is mined: neither the caller nor anyone else can choose it, by the timing
    ///         of the call or by changing the pool first. If the seed block's hash is out of
    ///         reach (over 256 blocks old), or an account joined or left the pool after the seed
    ///         block (`poolChangedAt > seedBlock`), the seed moves to the current block instead
    ///         (`CommitteeSeedMoved`); call again in a later block.
    function drawCommittee(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != Status.Drawing) revert WrongStatus(job.status);
        uint64 seedBlock = job.seedBlock;
        if (block.number <= seedBlock) revert SeedNotMined(seedBlock);
        bytes32 seedHash = blockhash(seedBlock);
        if (seedHash == bytes32(0) || poolChangedAt > seedBlock) {
            seedBlock = uint64(block.number);
            job.seedBlock = seedBlock;
            emit CommitteeSeedMoved(jobId, seedBlock);
            return;
        }
        address client = job.client;
        uint256 size = job.committeeSize;
        _checkPool(client, size);

        uint256 pooled = _pool.length;
        bytes32 seed = keccak256(abi.encode(seedHash, jobId));
        mapping(address => Member) storage members = _members[jobId];
        address[] memory committee = new address[](size);
        for (uint256 i; i < size; ++i) {
            uint256 idx = uint256(keccak256(abi.encode(seed, i))) % pooled;
            address v = _pool[idx];
            while (v == client || members[v].index != 0) {
                idx = (idx + 1) % pooled;
                v = _pool[idx];
            }
            members[v].index = uint8(i + 1);
            committee[i] = v;
        }
        job.committee = committee;
        bytes32 terms = _terms(job, committee);
        job.terms = terms;
        job.status = Status.Open;
        emit CommitteeDrawn(jobId, committee, terms);
    }

    /// @notice Client only. Opens epoch `current + 1` for `provider` at `pricePerStep`,
    ///         starting from the last accepted step and checkpoint, and ends the current
    ///         epoch if one is live (its unaccepted steps are never paid). The provider must
    ///         not be on the job's committee and must have `minStake` bonded for every epoch
    ///         it would then hold, this one included.
    /// @param bidSig the provider's EIP-712 `Bid` for exactly this job's terms, epoch, price
    ///        and expiry.
    function assign(uint256 jobId, address provider, uint256 pricePerStep, uint64 bidExpiry, bytes calldata bidSig)
        external
        nonReentrant
    {
        Job storage job = _existing(jobId);
        if (msg.sender != job.client) revert NotClient();
        Status status = job.status;
        if (status != Status.Open && status != Status.Assigned) revert WrongStatus(status);
        if (block.timestamp >= job.deadline) revert DeadlinePassed();
        if (block.timestamp > bidExpiry) revert BidExpired(bidExpiry);
        if (pricePerStep > job.maxPricePerStep) revert PriceTooHigh(pricePerStep, job.maxPricePerStep);
        if (pricePerStep == 0) revert ZeroAmount();
        // A provider that votes on its own checkpoints could approve its own work.
        if (_members[jobId][provider].index != 0) revert ProviderIsVerifier(provider);

        // End the live epoch before counting the provider's reservations, so that assigning
        // the same provider again does not need stake for its old epoch too. A revert below
        // rolls this back.
        if (status == Status.Assigned) _closeEpoch(jobId, job, EndReason.Replaced);

        Stake storage st = _stakes[provider];
        uint32 live = st.liveEpochs;
        uint256 needed = (uint256(live) + 1) * minStake;
        if (st.bonded < needed) revert InsufficientStake(st.bonded, needed);

        uint64 newEpoch = job.epoch + 1;
        _checkBid(hashBid(jobId, job.terms, newEpoch, provider, pricePerStep, bidExpiry), provider, bidSig);

        job.epoch = newEpoch;
        job.provider = provider;
        // ≤ maxPricePerStep, which fits 96 bits
        job.pricePerStep = uint96(pricePerStep);
        job.status = Status.Assigned;
        st.liveEpochs = live + 1;

        emit ProviderAssigned(jobId, newEpoch, provider, pricePerStep, job.lastAcceptedStep, job.lastCheckpointHash);
    }

    /// @notice Client only: ends the live epoch without a replacement; the job stays open.
    function releaseProvider(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (msg.sender != job.client) revert NotClient();
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        _closeEpoch(jobId, job, EndReason.Released);
        job.status = Status.Open;
    }

    /// @notice The assigned provider only: gives up the live epoch without a slash. Its
    ///         unaccepted work is unpaid, its reservation is released, and the job is open
    ///         for a new assignment (this provider included, with a new bid).
    function resign(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        if (msg.sender != job.provider) revert NotProvider();
        _endEpoch(jobId, job, EndReason.Resigned);
        job.status = Status.Open;
    }

    /// @notice Anyone may submit a quorum of accept `Vote`s for the current epoch's checkpoint
    ///         at `step` (strictly after the last accepted one; on the interval or the final
    ///         step). Credits the provider `(step - lastAccepted) * price` and charges the
    ///         budget `verifierFee` for every signer (credited to them by `settle`/`expire`);
    ///         the final step completes the job, leaving the rest of the budget for `settle`.
    ///         For an epoch the client ended, see `_acceptLate`: within `decisionWindow`, the
    ///         accept of its next checkpoint still pays its provider.
    function acceptCheckpoint(
        uint256 jobId,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) external nonReentrant {
        Job storage job = _jobs[jobId];
        if (epoch != job.epoch || job.status != Status.Assigned) {
            // an unknown job has status None and lands here
            _acceptLate(jobId, _existing(jobId), epoch, step, checkpointHash, sigs);
            return;
        }
        uint256 amount = uint256(step - _checkStep(job, step)) * job.pricePerStep;
        uint256 voters = _tally(jobId, job.quorum, hashVote(jobId, epoch, step, checkpointHash, true), sigs, true);
        address provider = job.provider;
        uint96 remaining = _payAccepted(jobId, job, epoch, step, checkpointHash, provider, amount, voters, sigs.length);

        if (step == job.totalSteps) {
            // The refund and the fees stay until `settle`: crediting them here would write
            // (usually fresh) balance slots on the hottest path.
            job.status = Status.Completed;
            _stakes[provider].liveEpochs -= 1;
            emit EpochEnded(jobId, epoch, EndReason.Completed);
            emit JobCompleted(jobId, remaining);
        }
    }

    /// @notice Anyone may submit a quorum of reject `Vote`s for a checkpoint of the current
    ///         epoch: the epoch ends and the job is open for a new assignment. Only when every
    ///         committee member signed is `minStake` of the provider's bonded stake burned; one
    ///         honest member keeps an honest provider's stake whole. The signers earn their fees
    ///         only from the budget's slack (`_reserve`), so rejects never eat into what the
    ///         rest of the job needs. The client gets nothing from a reject.
    function rejectCheckpoint(
        uint256 jobId,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        if (epoch != job.epoch) revert WrongEpoch(epoch, job.epoch);
        uint64 last = _checkStep(job, step);
        uint256 fees = uint256(job.verifierFee) * sigs.length;
        bool pay = job.remaining >= _reserve(job, last) + fees;
        uint256 voters = _tally(jobId, job.quorum, hashVote(jobId, epoch, step, checkpointHash, false), sigs, pay);
        if (pay) {
            job.remaining -= uint96(fees);
        } else {
            fees = 0;
        }

        address provider = job.provider;
        uint256 slashed;
        if (sigs.length == job.committeeSize) {
            // every member signed (they are distinct members). bonded ≥ liveEpochs × minStake
            // holds always, so this is minStake; the min is a guard
            Stake storage st = _stakes[provider];
            uint128 bonded = st.bonded;
            slashed = bonded < minStake ? bonded : minStake;
            st.bonded = bonded - uint128(slashed);
            burned += slashed;
        }
        emit CheckpointRejected(jobId, epoch, step, checkpointHash, provider, slashed, voters, fees);
        if (sigs.length == job.committeeSize) emit Slashed(provider, jobId, slashed);
        _endEpoch(jobId, job, EndReason.Rejected);
        job.status = Status.Open;
    }

    /// @notice Anyone, once, after the job is completed: credits every committee member the
    ///         fees it earned, then what is left of the budget to the client (possibly zero).
    function settle(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != Status.Completed) revert WrongStatus(job.status);
        if (job.settled) revert NothingToSettle();
        job.settled = true;
        address token = job.token;
        _creditFees(jobId, job, token);
        uint96 refund = job.remaining;
        job.remaining = 0;
        address client = job.client;
        _withdrawable[client][token] += refund;
        emit JobSettled(jobId, client, refund);
    }

    /// @notice Anyone, from `deadline + grace` on, for a job still drawing, open or assigned:
    ///         ends any live epoch, credits the committee its fees and the client the unspent
    ///         budget.
    function expire(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        Status status = job.status;
        if (status != Status.Open && status != Status.Assigned && status != Status.Drawing) {
            revert WrongStatus(status);
        }
        uint256 allowedAt = uint256(job.deadline) + job.grace;
        if (block.timestamp < allowedAt) revert TooEarly(allowedAt);

        if (status == Status.Assigned) _endEpoch(jobId, job, EndReason.Expired);
        address token = job.token;
        _creditFees(jobId, job, token);
        uint96 refund = job.remaining;
        job.remaining = 0;
        job.status = Status.Expired;
        _withdrawable[job.client][token] += refund;
        emit JobExpired(jobId, refund);
    }

    // ------------------------------------------------------ provider stake

    /// @notice Adds `amount` of the stake token to the caller's bonded stake (approve first).
    ///         Allowed while some stake is unbonding; that stays unbonding.
    function register(uint256 amount) external nonReentrant {
        if (amount == 0) revert ZeroAmount();
        Stake storage st = _stakes[msg.sender];
        uint256 total = st.bonded + amount;
        if (total > type(uint128).max) revert AmountTooLarge();
        st.bonded = uint128(total);
        emit Staked(msg.sender, amount, total);

        _pullExact(stakeToken, amount);
    }

    /// @notice Moves `amount` of the caller's bonded stake to unbonding and (re)starts the
    ///         delay for everything unbonding. Only stake above the reservation of its live
    ///         epochs (`liveEpochs × minStake`) is free to unbond; unbonding stake can be
    ///         neither reserved nor slashed.
    function requestUnbond(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        Stake storage st = _stakes[msg.sender];
        uint128 bonded = st.bonded;
        uint256 locked = uint256(st.liveEpochs) * minStake;
        uint256 free = bonded > locked ? bonded - locked : 0;
        if (amount > free) revert StakeLocked(free, amount);
        // amount ≤ bonded < 2^128
        st.bonded = bonded - uint128(amount);
        st.unbonding += uint128(amount);
        uint64 availableAt = uint64(block.timestamp) + unbondDelay;
        st.unbondAt = availableAt;
        emit UnbondRequested(msg.sender, amount, availableAt);
    }

    /// @notice Pays the caller's unbonding stake out once the delay has passed; bonded stake
    ///         stays.
    function withdrawStake() external nonReentrant {
        Stake storage st = _stakes[msg.sender];
        uint256 amount = st.unbonding;
        if (amount == 0) revert NotUnbonding();
        uint64 unbondAt = st.unbondAt;
        if (block.timestamp < unbondAt) revert TooEarly(unbondAt);
        st.unbonding = 0;
        st.unbondAt = 0;
        emit StakeWithdrawn(msg.sender, amount);
        stakeToken.safeTransfer(msg.sender, amount);
    }

    // ------------------------------------------------------ verifier stake

    /// @notice Adds `amount` of the stake token to the caller's bonded verifier stake (approve
    ///         first); when it reaches `minVerifierStake` the caller joins the end of the pool
    ///         committees are drawn from. Allowed while some stake is unbonding.
    function registerVerifier(uint256 amount) external nonReentrant {
        if (amount == 0) revert ZeroAmount();
        VerifierStake storage vs = _verifierStakes[msg.sender];
        uint256 total = vs.bonded + amount;
        if (total > type(uint128).max) revert AmountTooLarge();
        vs.bonded = uint128(total);
        if (vs.poolIndex == 0 && total >= minVerifierStake) {
            _pool.push(msg.sender);
            vs.poolIndex = uint64(_pool.length);
            poolChangedAt = uint64(block.number);
        }
        emit VerifierStaked(msg.sender, amount, total);

        _pullExact(stakeToken, amount);
    }

    /// @notice Moves `amount` of the caller's bonded verifier stake to unbonding and (re)starts
    ///         the delay for everything unbonding. When bonded falls below `minVerifierStake`
    ///         the caller leaves the pool: the pool's last entry takes its place. Committees it
    ///         already sits on keep it.
    function requestVerifierUnbond(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        VerifierStake storage vs = _verifierStakes[msg.sender];
        uint128 bonded = vs.bonded;
        if (amount > bonded) revert StakeLocked(bonded, amount);
        // amount ≤ bonded < 2^128
        bonded -= uint128(amount);
        vs.bonded = bonded;
        vs.unbonding += uint128(amount);
        uint64 availableAt = uint64(block.timestamp) + unbondDelay;
        vs.unbondAt = availableAt;
        uint64 poolIndex = vs.poolIndex;
        if (poolIndex != 0 && bonded < minVerifierStake) {
            uint256 lastIndex = _pool.length - 1;
            if (poolIndex - 1 != lastIndex) {
                address moved = _pool[lastIndex];
                _pool[poolIndex - 1] = moved;
                _verifierStakes[moved].poolIndex = poolIndex;
            }
            _pool.pop();
            vs.poolIndex = 0;
            poolChangedAt = uint64(block.number);
        }
        emit VerifierUnbondRequested(msg.sender, amount, availableAt);
    }

    /// @notice Pays the caller's unbonding verifier stake out once the delay has passed.
    function withdrawVerifierStake() external nonReentrant {
        VerifierStake storage vs = _verifierStakes[msg.sender];
        uint256 amount = vs.unbonding;
        if (amount == 0) revert NotUnbonding();
        uint64 unbondAt = vs.unbondAt;
        if (block.timestamp < unbondAt) revert TooEarly(unbondAt);
        vs.unbonding = 0;
        vs.unbondAt = 0;
        emit VerifierStakeWithdrawn(msg.sender, amount);
        stakeToken.safeTransfer(msg.sender, amount);
    }

    // ------------------------------------------------------------- payouts

    /// @notice Pays the caller everything credited to it in `token`.
    function withdraw(IERC20 token) external nonReentrant {
        uint256 amount = _withdrawable[msg.sender][address(token)];
        if (amount == 0) revert NothingToWithdraw();
        _withdrawable[msg.sender][address(token)] = 0;
        emit Withdrawn(msg.sender, address(token), amount);
        token.safeTransfer(msg.sender, amount);
    }

    // --------------------------------------------------------------- views

    function getJob(uint256 jobId) external view returns (JobView memory v) {
        Job storage job = _existing(jobId);
        v.client = job.client;
        v.token = job.token;
        v.status = job.status;
        v.epoch = job.epoch;
        v.provider = job.provider;
        v.pricePerStep = job.pricePerStep;
        v.maxPricePerStep = job.maxPricePerStep;
        v.deposit = job.deposit;
        v.remaining = job.remaining;
        v.totalSteps = job.totalSteps;
        v.checkpointInterval = job.checkpointInterval;
        v.lastAcceptedStep = job.lastAcceptedStep;
        v.lastCheckpointHash = job.lastCheckpointHash;
        v.specHash = job.specHash;
        v.committee = job.committee;
        v.committeeSize = job.committeeSize;
        v.quorum = job.quorum;
        v.verifierFee = job.verifierFee;
        v.seedBlock = job.seedBlock;
        v.deadline = job.deadline;
        v.grace = job.grace;
        v.settled = job.settled;
        v.terms = job.terms;
    }

    /// @return the job's terms, what every bid for it signs (see `_terms`); zero before the draw.
    function termsOf(uint256 jobId) external view returns (bytes32) {
        return _existing(jobId).terms;
    }

    function withdrawable(address account, IERC20 token) external view returns (uint256) {
        return _withdrawable[account][address(token)];
    }

    /// @return bonded (reservable and slashable), unbonding (paid out from `unbondAt`; 0 when
    ///         nothing is unbonding), and the number of live epochs held.
    function stakeOf(address provider)
        external
        view
        returns (uint256 bonded, uint256 unbonding, uint64 unbondAt, uint32 liveEpochs)
    {
        Stake storage st = _stakes[provider];
        return (st.bonded, st.unbonding, st.unbondAt, st.liveEpochs);
    }

    /// @return bonded its bonded verifier stake (never slashed nor reserved)
    /// @return unbonding paid out from `unbondAt` (0 when nothing is unbonding)
    /// @return unbondAt when the unbonding part can be withdrawn
    /// @return pooled whether the verifier is in the pool (bonded ≥ `minVerifierStake`)
    function verifierStakeOf(address verifier)
        external
        view
        returns (uint256 bonded, uint256 unbonding, uint64 unbondAt, bool pooled)
    {
        VerifierStake storage vs = _verifierStakes[verifier];
        return (vs.bonded, vs.unbonding, vs.unbondAt, vs.poolIndex != 0);
    }

    /// @notice How many verifiers are in the pool.
    function poolSize() external view returns (uint256) {
        return _pool.length;
    }

    /// @notice The pool's entry at `index` (0-based; reverts past the end). The order is the
    ///         draw's: registrations append, a leaver's place takes the last entry.
    function poolAt(uint256 index) external view returns (address) {
        return _pool[index];
    }

    /// @return index the account's 1-based position in the job's committee, 0 for a non-member;
    ///         paid the decisions it earned a fee for.
    function memberOf(uint256 jobId, address account) external view returns (uint8 index, uint64 paid) {
        Member storage m = _members[jobId][account];
        return (m.index, m.paid);
    }

    /// @notice Whether `account` sits on the job's committee.
    function isVerifier(uint256 jobId, address account) external view returns (bool) {
        return _members[jobId][account].index != 0;
    }

    /// @notice The record a late accept of `epoch` would use; zeros when there is none (the
    ///         epoch is live, was not ended by the client, or its late accept landed).
    function closedEpoch(uint256 jobId, uint64 epoch)
        external
        view
        returns (address provider, uint256 pricePerStep, uint64 stepAtEnd, uint64 windowEnd)
    {
        Closed storage c = _closed[jobId][epoch];
        return (c.provider, c.pricePerStep, c.stepAtEnd, c.windowEnd);
    }

    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    /// @return the EIP-712 digest a provider signs for a `Bid`.
    function hashBid(uint256 jobId, bytes32 terms, uint64 epoch, address provider, uint256 pricePerStep, uint64 expiry)
        public
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(
            keccak256(abi.encode(BID_TYPEHASH, jobId, terms, epoch, provider, pricePerStep, expiry))
        );
    }

    /// @return the EIP-712 digest a verifier signs for a `Vote`.
    function hashVote(uint256 jobId, uint64 epoch, uint64 step, bytes32 checkpointHash, bool accept)
        public
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(VOTE_TYPEHASH, jobId, epoch, step, checkpointHash, accept)));
    }

    // ------------------------------------------------------------ internal

    function _existing(uint256 jobId) private view returns (Job storage job) {
        job = _jobs[jobId];
        if (job.status == Status.None) revert UnknownJob(jobId);
    }

    function _checkBudget(
        uint256 budget,
        uint256 maxPricePerStep,
        uint64 totalSteps,
        uint64 checkpointInterval,
        uint256 committeeSize,
        uint256 verifierFee
    ) private pure {
        // ≤ 2^96 × 2^64 + 2^96 × 2^5 × 2^64: no overflow
        uint256 checkpoints = (uint256(totalSteps) + checkpointInterval - 1) / checkpointInterval;
        uint256 needed = maxPricePerStep * totalSteps + verifierFee * committeeSize * checkpoints;
        if (budget < needed) revert BudgetTooSmall(budget, needed);
    }

    /// @dev The pool must hold `size` accounts other than `client` (who is never drawn).
    function _checkPool(address client, uint256 size) private view {
        uint256 available = _pool.length;
        if (_verifierStakes[client].poolIndex != 0) available -= 1;
        if (available < size) revert NotEnoughVerifiers(available, size);
    }

    /// @dev What `remaining` must always cover once `last` steps are accepted: every step left
    ///      at the maximum price, and a fee for every member on every checkpoint left.
    function _reserve(Job storage job, uint64 last) private view returns (uint256) {
        uint256 left = job.totalSteps - last;
        uint256 interval = job.checkpointInterval;
        return uint256(job.maxPricePerStep) * left
            + uint256(job.verifierFee) * job.committeeSize * ((left + interval - 1) / interval);
    }

    /// @dev The checks of a live epoch's decision after its status and epoch, in the spec's
    ///      order but for the quorum (`_tally`); returns the last accepted step.
    function _checkStep(Job storage job, uint64 step) private view returns (uint64 last) {
        if (block.timestamp > uint256(job.deadline) + job.grace) revert TooLate();
        last = job.lastAcceptedStep;
        if (step <= last) revert StepNotIncreasing(step, last);
        uint64 total = job.totalSteps;
        if (step > total || (step != total && step % job.checkpointInterval != 0)) revert StepOffInterval(step);
    }

    /// @dev Every signature must be a valid low-s signature by a distinct committee member,
    ///      at most 32 and at least `quorum` of them. Returns the signers as a bit set over
    ///      committee positions and, when `pay`, counts a fee for each of them.
    function _tally(uint256 jobId, uint256 quorum, bytes32 digest, bytes[] calldata sigs, bool pay)
        private
        returns (uint256 voters)
    {
        uint256 n = sigs.length;
        if (n > MAX_VERIFIERS) revert TooManySignatures();
        if (n < quorum) revert QuorumNotReached(n, quorum);
        mapping(address => Member) storage members = _members[jobId];
        for (uint256 i; i < n; ++i) {
            (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecoverCalldata(digest, sigs[i]);
            if (err != ECDSA.RecoverError.NoError) revert BadSignature(i);
            // The member's slot is read once and, to count the fee, written once: `index` is
            // its low byte and `paid` the 64 bits above it (one per decision: 2^64 decisions
            // are out of reach, so adding 1 << 8 never carries out of `paid`).
            Member storage m = members[signer];
            uint256 word;
            assembly ("memory-safe") {
                word := sload(m.slot)
            }
            uint256 index = word & 0xff;
            if (index == 0) revert NotVerifier(signer);
            uint256 bit = 1 << (index - 1);
            if (voters & bit != 0) revert DuplicateSigner(signer);
            voters |= bit;
            if (pay) {
                assembly ("memory-safe") {
                    sstore(m.slot, add(word, 0x100))
                }
            }
        }
    }

    /// @dev Credits each committee member, in committee order, the fees it earned on the job.
    function _creditFees(uint256 jobId, Job storage job, address token) private {
        address[] storage committee = job.committee;
        uint256 n = committee.length;
        if (n == 0) return;
        uint256 fee = job.verifierFee;
        mapping(address => Member) storage members = _members[jobId];
        for (uint256 i; i < n; ++i) {
            address v = committee[i];
            uint256 paid = members[v].paid;
            if (paid == 0) continue;
            uint256 amount = paid * fee;
            _withdrawable[v][token] += amount;
            emit FeesCredited(jobId, v, amount);
        }
    }

    /// @dev The bid must be a valid low-s signature by `provider` itself.
    function _checkBid(bytes32 digest, address provider, bytes calldata sig) private pure {
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecoverCalldata(digest, sig);
        if (err != ECDSA.RecoverError.NoError) revert BadSignature(0);
        if (recovered != provider) revert WrongSigner(recovered, provider);
    }

    /// @dev What a bid signs: everything the client fixed at creation and the drawn committee,
    ///      so a provider's bid is good only for the job it read, never for a job with the same
    ///      id and other terms (after a reorg, or shown to it by a dishonest node). The
    ///      committee enters as the keccak of its 32-byte-padded entries, in draw order.
    function _terms(Job storage job, address[] memory committee) private view returns (bytes32) {
        return keccak256(
            abi.encode(
                job.client,
                job.token,
                uint256(job.deposit),
                uint256(job.maxPricePerStep),
                job.totalSteps,
                job.checkpointInterval,
                job.specHash,
                keccak256(abi.encodePacked(committee)),
                job.quorum,
                uint256(job.verifierFee),
                job.deadline,
                job.grace
            )
        );
    }

    /// @dev Fee-on-transfer or rebasing tokens would break the books: take exactly
    ///      `amount` or nothing.
    function _pullExact(IERC20 token, uint256 amount) private {
        uint256 before = token.balanceOf(address(this));
        token.safeTransferFrom(msg.sender, address(this), amount);
        uint256 received = token.balanceOf(address(this)) - before;
        if (received != amount) revert DepositMismatch(received, amount);
    }

    /// @dev Its own frame: createJob's parameters alone fill the stack.
    function _emitCreated(uint256 jobId, Job storage job) private {
        emit JobCreated(
            jobId,
            job.client,
            job.token,
            job.deposit,
            job.maxPricePerStep,
            job.totalSteps,
            job.checkpointInterval,
            job.specHash,
            job.committeeSize,
            job.quorum,
            job.verifierFee,
            job.deadline,
            job.grace,
            job.seedBlock
        );
    }

    /// @dev Ends the live epoch on the client's word and keeps what a late accept of it needs.
    function _closeEpoch(uint256 jobId, Job storage job, EndReason reason) private {
        _closed[jobId][job.epoch] = Closed({
            provider: job.provider,
            pricePerStep: job.pricePerStep,
            stepAtEnd: job.lastAcceptedStep,
            windowEnd: uint64(block.timestamp) + decisionWindow
        });
        _endEpoch(jobId, job, reason);
    }

    /// @dev The accept of a checkpoint of an epoch the client ended. Without this rule a
    ///      client that sees a quorum's accept coming (in the mempool, or on gossip) could end
    ///      the epoch first and make it worthless. What it pays is bounded so that fencing
    ///      stays sound: only within `decisionWindow` of the end, only the next checkpoint
    ///      after the head the epoch ended at (at most one interval of work, which it had been
    ///      computing when it was fenced), only while the head is still there (so the paid
    ///      checkpoint extends the accepted chain), once, and never a reject (the client that
    ///      ended the epoch already stopped paying it, and its provider's reservation is free).
    ///      The signers earn their fees as for any accept. A live epoch started from the old
    ///      head is then ended as `Superseded`, unslashed, so the job goes on from the new head
    ///      instead of from a fork of it.
    function _acceptLate(
        uint256 jobId,
        Job storage job,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) private {
        (Closed memory c, Status status, uint256 amount) = _checkLate(jobId, job, epoch, step);
        uint256 voters = _tally(jobId, job.quorum, hashVote(jobId, epoch, step, checkpointHash, true), sigs, true);

        delete _closed[jobId][epoch];
        uint96 remaining = _payAccepted(jobId, job, epoch, step, checkpointHash, c.provider, amount, voters, sigs.length);

        if (status == Status.Assigned) {
            _endEpoch(jobId, job, EndReason.Superseded);
            job.status = Status.Open;
        }
        if (step == job.totalSteps) {
            job.status = Status.Completed;
            emit JobCompleted(jobId, remaining);
        }
    }

    /// @dev A late accept's checks, in the spec's order but for the quorum (`_tally`); returns
    ///      the record, the job's status and what the accept pays the record's provider.
    function _checkLate(uint256 jobId, Job storage job, uint64 epoch, uint64 step)
        private
        view
        returns (Closed memory c, Status status, uint256 amount)
    {
        c = _closed[jobId][epoch];
        status = job.status;
        if (c.provider == address(0)) {
            if (status != Status.Assigned) revert WrongStatus(status);
            revert WrongEpoch(epoch, job.epoch);
        }
        if (status != Status.Open && status != Status.Assigned) revert WrongStatus(status);
        if (block.timestamp > c.windowEnd) revert WindowClosed(c.windowEnd);
        if (block.timestamp > uint256(job.deadline) + job.grace) revert TooLate();
        uint64 last = job.lastAcceptedStep;
        if (last != c.stepAtEnd) revert MovedOn(last, c.stepAtEnd);
        if (step <= last) revert StepNotIncreasing(step, last);
        uint64 total = job.totalSteps;
        uint64 interval = job.checkpointInterval;
        if (step > total || (step != total && step % interval != 0)) revert StepOffInterval(step);
        if (step - last > interval) revert BeyondNextCheckpoint(step);
        amount = uint256(step - last) * c.pricePerStep;
    }

    /// @dev The books of an accept: the payee is credited `amount`, the budget is charged it
    ///      and a fee per signer, and the head moves to `step`. `remaining` covers the rest of
    ///      the job at the maximum price and its fees (see `_reserve`), and an accept takes at
    ///      most one checkpoint's share of both, so this never underflows.
    function _payAccepted(
        uint256 jobId,
        Job storage job,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        address payee,
        uint256 amount,
        uint256 voters,
        uint256 signers
    ) private returns (uint96 remaining) {
        uint256 fees = uint256(job.verifierFee) * signers;
        remaining = uint96(job.remaining - amount - fees);
        job.lastAcceptedStep = step;
        job.remaining = remaining;
        job.lastCheckpointHash = checkpointHash;
        _withdrawable[payee][job.token] += amount;
        emit CheckpointAccepted(jobId, epoch, step, checkpointHash, payee, amount, voters, fees);
    }

    function _endEpoch(uint256 jobId, Job storage job, EndReason reason) private {
        _stakes[job.provider].liveEpochs -= 1;
        emit EpochEnded(jobId, job.epoch, reason);
    }
}
