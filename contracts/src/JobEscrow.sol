// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title JobEscrow
/// @notice Escrow for fine-tuning jobs run on untrusted providers. A client locks a budget;
///         providers are assigned in numbered epochs (the fencing token: only the current
///         epoch's checkpoints can be paid); a quorum of the job's verifiers accepts or
///         rejects each checkpoint with EIP-712 votes. Accepted steps are paid at the
///         assigned price; a rejected checkpoint ends the epoch and slashes `minStake` of the
///         provider's stake, which is burned: it stays in this contract for good and is
///         credited to no one, so nobody who can cause a reject can profit from one. Every
///         payment is pull-based (`withdraw`), and every job can be exited: after completion
///         anyone may `settle` the rest to the client, and after `deadline + grace` anyone may
///         `expire` it.
/// @dev    Rules that bound what a client (who names the verifiers, for now) can do to a
///         provider, and what a provider can do to a client:
///         - a job has 2..32 distinct verifiers, none of them its client nor its assigned
///           provider, and a strict-majority quorum, so no one key decides alone and an
///           accepting and a rejecting quorum always share a verifier;
///         - `deadline` is at most `maxDuration` ahead and `grace` at most `maxGrace`, so stake
///           and budget are never locked for longer than the deployer allows;
///         - a provider's stake is reserved per live epoch: holding n epochs needs n ×
///           `minStake` bonded, so every rejected epoch can slash exactly `minStake`, and only
///           the part above the reservation can be unbonded;
///         - a provider may `resign` its live epoch at any time without a slash (its unaccepted
///           work is unpaid), so it is never stuck behind a client that never decides;
///         - each bid signs the job's `terms` (a hash of everything the client fixed at
///           creation), so a bid is only good for the job its provider read.
///         Verifier fees are not charged for now: verifiers are paid nothing by this contract.
contract JobEscrow is ReentrancyGuardTransient, EIP712 {
    using SafeERC20 for IERC20;

    // ---------------------------------------------------------------- types

    enum Status {
        None,
        Open, // no provider holds the job; the client may assign one
        Assigned, // a provider holds the current epoch
        Completed, // the last step was accepted; `settle` credits what is left to the client
        Expired // exited after deadline + grace
    }

    /// @notice Why an epoch ended (the `reason` of `EpochEnded`).
    enum EndReason {
        Replaced, // the client assigned another provider (or the same one, with a new bid)
        Released, // the client ended it without a replacement
        Rejected, // a quorum rejected one of its checkpoints
        Completed, // its checkpoint finished the job
        Expired, // the job expired while it was live
        Resigned // its provider gave it up
    }

    /// @dev Packed for `acceptCheckpoint`, the call a job makes most: it reads slots 0-4 only
    ///      (the client, the price cap, the deposit and the hashes are read elsewhere), and
    ///      the final accept's status write lands in slot 0, which the step write has already
    ///      dirtied, so completing costs a warm write, not a fresh one.
    struct Job {
        // slot 0: the decision checks and the payee
        address provider;
        uint64 lastAcceptedStep;
        Status status;
        uint8 quorum;
        // slot 1
        address token;
        uint64 epoch;
        // slot 2
        uint128 pricePerStep;
        uint128 remaining;
        // slot 3
        uint64 totalSteps;
        uint64 checkpointInterval;
        uint64 deadline;
        uint64 grace;
        // slot 4
        bytes32 lastCheckpointHash;
        // slot 5
        address client;
        // slot 6
        uint128 maxPricePerStep;
        uint128 deposit;
        // slot 7
        bytes32 specHash;
        // slot 8
        bytes32 terms;
        address[] verifiers;
    }

    /// @notice A job as `getJob` returns it. `remaining` is the budget not yet paid nor
    ///         refunded (after completion: the refund `settle` will credit); `deposit` the
    ///         budget pulled at creation; `lastCheckpointHash` is the last accepted
    ///         checkpoint, or `specHash` before any; `terms` what every bid signs.
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
        address[] verifiers;
        uint8 quorum;
        uint64 deadline;
        uint64 grace;
        bytes32 terms;
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

    // ------------------------------------------------------------ constants

    bytes32 public constant BID_TYPEHASH = keccak256(
        "Bid(uint256 jobId,bytes32 terms,uint64 epoch,address provider,uint256 pricePerStep,uint64 expiry)"
    );
    bytes32 public constant VOTE_TYPEHASH =
        keccak256("Vote(uint256 jobId,uint64 epoch,uint64 step,bytes32 checkpointHash,bool accept)");

    /// @notice Bound on a job's verifier list: quorum checks are quadratic in it.
    uint256 public constant MAX_VERIFIERS = 32;

    // ---------------------------------------------------------------- state

    /// @notice The token every provider stakes in.
    IERC20 public immutable stakeToken;
    /// @notice Stake reserved per live epoch, and what one rejected epoch slashes.
    uint256 public immutable minStake;
    /// @notice Seconds between the last `requestUnbond` and `withdrawStake`.
    uint64 public immutable unbondDelay;
    /// @notice The furthest ahead of its creation a job's deadline may be, in seconds.
    uint64 public immutable maxDuration;
    /// @notice The longest grace a job may have after its deadline, in seconds.
    uint64 public immutable maxGrace;

    uint256 public jobCount;
    /// @notice Stake slashed so far. It stays in this contract for good: no function pays it out.
    uint256 public burned;
    mapping(uint256 jobId => Job) private _jobs;
    mapping(uint256 jobId => mapping(address verifier => bool)) private _isVerifier;
    mapping(address provider => Stake) private _stakes;
    mapping(address account => mapping(address token => uint256)) private _withdrawable;

    // --------------------------------------------------------------- events

    /// @notice A job was opened and its budget escrowed.
    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed token,
        uint256 budget,
        uint256 maxPricePerStep,
        uint64 totalSteps,
        uint64 checkpointInterval,
        bytes32 specHash,
        address[] verifiers,
        uint8 quorum,
        uint64 deadline,
        uint64 grace
    );
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
    /// @notice The epoch is over; checkpoints of it can no longer be accepted or rejected.
    event EpochEnded(uint256 indexed jobId, uint64 indexed epoch, EndReason reason);
    /// @notice A quorum accepted `step`; `amount` was credited to `provider`.
    event CheckpointAccepted(
        uint256 indexed jobId,
        uint64 indexed epoch,
        uint64 step,
        bytes32 checkpointHash,
        address indexed provider,
        uint256 amount
    );
    /// @notice A quorum rejected `step`; the epoch ends and `slashed` stake is burned.
    event CheckpointRejected(
        uint256 indexed jobId,
        uint64 indexed epoch,
        uint64 step,
        bytes32 checkpointHash,
        address indexed provider,
        uint256 slashed
    );
    /// @notice The final step was accepted; `refund` is left for `settle` to credit to the client.
    event JobCompleted(uint256 indexed jobId, uint256 refund);
    /// @notice The completed job's `refund` was credited to `client`.
    event JobSettled(uint256 indexed jobId, address indexed client, uint256 refund);
    /// @notice The job was exited after deadline + grace; `refund` was credited to the client.
    event JobExpired(uint256 indexed jobId, uint256 refund);
    /// @notice `provider` added `amount` to its bonded stake, now `totalBonded`.
    event Staked(address indexed provider, uint256 amount, uint256 totalBonded);
    /// @notice `provider` moved `amount` of bonded stake to unbonding; everything it has
    ///         unbonding can be withdrawn from `availableAt` on.
    event UnbondRequested(address indexed provider, uint256 amount, uint64 availableAt);
    /// @notice `provider` took its unbonded stake back.
    event StakeWithdrawn(address indexed provider, uint256 amount);
    /// @notice `amount` of `provider`'s stake was burned for a rejected epoch of `jobId`.
    event Slashed(address indexed provider, uint256 indexed jobId, uint256 amount);
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
    error ClientIsVerifier();
    error BudgetTooSmall(uint256 budget, uint256 needed);
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

    // ---------------------------------------------------------- constructor

    /// @param maxDuration_ must be non-zero; `maxGrace_` may be zero (no grace at all).
    constructor(IERC20 stakeToken_, uint256 minStake_, uint64 unbondDelay_, uint64 maxDuration_, uint64 maxGrace_)
        EIP712("GpuChain JobEscrow", "1")
    {
        if (address(stakeToken_) == address(0)) revert ZeroAddress();
        if (minStake_ == 0 || maxDuration_ == 0) revert ZeroAmount();
        stakeToken = stakeToken_;
        minStake = minStake_;
        unbondDelay = unbondDelay_;
        maxDuration = maxDuration_;
        maxGrace = maxGrace_;
    }

    // ----------------------------------------------------------------- jobs

    /// @notice Opens a job and pulls `budget` of `token` from the caller (approve first).
    ///         The budget must cover every step at the maximum price, so no accepted
    ///         checkpoint can ever be short of funds.
    /// @param verifiers 2..32 distinct, non-zero accounts, the caller not among them: a client
    ///        that could vote could reject honest work on its own.
    /// @param quorum    a strict majority of `verifiers` must sign each decision, so two
    ///        disjoint quorums (one accepting, one rejecting) cannot both exist.
    /// @param deadline  in the future and at most `maxDuration` ahead; no assignment after it.
    /// @param grace     at most `maxGrace`; `expire` is open from `deadline + grace`.
    function createJob(
        IERC20 token,
        uint256 budget,
        uint256 maxPricePerStep,
        uint64 totalSteps,
        uint64 checkpointInterval,
        bytes32 specHash,
        address[] calldata verifiers,
        uint8 quorum,
        uint64 deadline,
        uint64 grace
    ) external nonReentrant returns (uint256 jobId) {
        if (address(token) == address(0)) revert ZeroAddress();
        if (budget == 0 || maxPricePerStep == 0) revert ZeroAmount();
        if (budget > type(uint128).max || maxPricePerStep > type(uint128).max) revert AmountTooLarge();
        if (totalSteps == 0 || checkpointInterval == 0 || checkpointInterval > totalSteps) revert InvalidSteps();
        if (verifiers.length < 2 || verifiers.length > MAX_VERIFIERS) revert InvalidVerifiers();
        if (uint256(quorum) * 2 <= verifiers.length || quorum > verifiers.length) revert InvalidQuorum();
        if (deadline <= block.timestamp) revert DeadlinePassed();
        if (deadline > block.timestamp + maxDuration) revert DeadlineTooFar(deadline, block.timestamp + maxDuration);
        if (grace > maxGrace) revert GraceTooLong(grace, maxGrace);
        // uint128 × uint64 cannot overflow uint256
        if (budget < maxPricePerStep * totalSteps) revert BudgetTooSmall(budget, maxPricePerStep * totalSteps);

        jobId = ++jobCount;
        _listVerifiers(jobId, verifiers);

        Job storage job = _jobs[jobId];
        job.client = msg.sender;
        job.status = Status.Open;
        job.quorum = quorum;
        job.token = address(token);
        job.totalSteps = totalSteps;
        job.remaining = uint128(budget);
        job.maxPricePerStep = uint128(maxPricePerStep);
        job.deposit = uint128(budget);
        job.checkpointInterval = checkpointInterval;
        job.deadline = deadline;
        job.grace = grace;
        job.specHash = specHash;
        // The checkpoint chain is rooted at the spec (which names the base weights): epoch 1
        // starts from it, and the first accepted checkpoint overwrites a non-zero slot, which
        // keeps that acceptCheckpoint about 17k gas cheaper.
        job.lastCheckpointHash = specHash;
        job.verifiers = verifiers;
        job.terms = _terms(job, verifiers);
        _emitCreated(jobId, job);

        _pullExact(token, budget);
    }

    /// @notice Client only. Opens epoch `current + 1` for `provider` at `pricePerStep`,
    ///         starting from the last accepted step and checkpoint, and ends the current
    ///         epoch if one is live (its unaccepted steps are never paid). The provider must
    ///         not be one of the job's verifiers and must have `minStake` bonded for every
    ///         epoch it would then hold, this one included.
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
        if (_isVerifier[jobId][provider]) revert ProviderIsVerifier(provider);

        // End the live epoch before counting the provider's reservations, so that assigning
        // the same provider again does not need stake for its old epoch too. A revert below
        // rolls this back.
        if (status == Status.Assigned) _endEpoch(jobId, job, EndReason.Replaced);

        Stake storage st = _stakes[provider];
        uint32 live = st.liveEpochs;
        uint256 needed = (uint256(live) + 1) * minStake;
        if (st.bonded < needed) revert InsufficientStake(st.bonded, needed);

        uint64 newEpoch = job.epoch + 1;
        _checkBid(hashBid(jobId, job.terms, newEpoch, provider, pricePerStep, bidExpiry), provider, bidSig);

        job.epoch = newEpoch;
        job.provider = provider;
        job.pricePerStep = uint128(pricePerStep);
        job.status = Status.Assigned;
        st.liveEpochs = live + 1;

        emit ProviderAssigned(jobId, newEpoch, provider, pricePerStep, job.lastAcceptedStep, job.lastCheckpointHash);
    }

    /// @notice Client only: ends the live epoch without a replacement; the job stays open.
    function releaseProvider(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (msg.sender != job.client) revert NotClient();
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        _endEpoch(jobId, job, EndReason.Released);
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
    ///         step). Credits the provider `(step - lastAccepted) * price`; the final step
    ///         completes the job, leaving the rest of the budget for `settle`.
    function acceptCheckpoint(
        uint256 jobId,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) external nonReentrant {
        Job storage job = _existing(jobId);
        (uint64 last, uint64 total) = _checkDecision(jobId, job, epoch, step, checkpointHash, true, sigs);

        address provider = job.provider;
        // price ≤ maxPrice and budget ≥ maxPrice × totalSteps, so `remaining` always covers this
        uint128 amount = uint128(step - last) * job.pricePerStep;
        uint128 remaining = job.remaining - amount;
        job.lastAcceptedStep = step;
        job.lastCheckpointHash = checkpointHash;
        job.remaining = remaining;
        _withdrawable[provider][job.token] += amount;
        emit CheckpointAccepted(jobId, epoch, step, checkpointHash, provider, amount);

        if (step == total) {
            // The refund stays in `remaining` until `settle`: crediting the client here would
            // write a (usually fresh) balance slot on the hottest path.
            job.status = Status.Completed;
            _stakes[provider].liveEpochs -= 1;
            emit EpochEnded(jobId, epoch, EndReason.Completed);
            emit JobCompleted(jobId, remaining);
        }
    }

    /// @notice Anyone may submit a quorum of reject `Vote`s for a checkpoint of the current
    ///         epoch: the epoch ends, `minStake` of the provider's bonded stake is burned, and
    ///         the job is open for a new assignment. The client gets nothing from it: whoever
    ///         could profit from a reject could cause one.
    function rejectCheckpoint(
        uint256 jobId,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) external nonReentrant {
        Job storage job = _existing(jobId);
        _checkDecision(jobId, job, epoch, step, checkpointHash, false, sigs);

        address provider = job.provider;
        Stake storage st = _stakes[provider];
        // bonded ≥ liveEpochs × minStake holds always, so this is minStake; the min is a guard
        uint128 bonded = st.bonded;
        uint128 slashed = bonded < minStake ? bonded : uint128(minStake);
        st.bonded = bonded - slashed;
        burned += slashed;

        emit CheckpointRejected(jobId, epoch, step, checkpointHash, provider, slashed);
        emit Slashed(provider, jobId, slashed);
        _endEpoch(jobId, job, EndReason.Rejected);
        job.status = Status.Open;
    }

    /// @notice Anyone, once the job is completed: credits what is left of the budget to the
    ///         client. Once per job; a job that used its whole budget has nothing to settle.
    function settle(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        if (job.status != Status.Completed) revert WrongStatus(job.status);
        uint128 refund = job.remaining;
        if (refund == 0) revert NothingToSettle();
        job.remaining = 0;
        address client = job.client;
        _withdrawable[client][job.token] += refund;
        emit JobSettled(jobId, client, refund);
    }

    /// @notice Anyone, from `deadline + grace` on: ends any live epoch and credits the unspent
    ///         budget to the client.
    function expire(uint256 jobId) external nonReentrant {
        Job storage job = _existing(jobId);
        Status status = job.status;
        if (status != Status.Open && status != Status.Assigned) revert WrongStatus(status);
        uint256 allowedAt = uint256(job.deadline) + job.grace;
        if (block.timestamp < allowedAt) revert TooEarly(allowedAt);

        if (status == Status.Assigned) _endEpoch(jobId, job, EndReason.Expired);
        uint128 refund = job.remaining;
        job.remaining = 0;
        job.status = Status.Expired;
        _withdrawable[job.client][job.token] += refund;
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
        v.verifiers = job.verifiers;
        v.quorum = job.quorum;
        v.deadline = job.deadline;
        v.grace = job.grace;
        v.terms = job.terms;
    }

    /// @return the job's terms, what every bid for it signs (see `createJob`'s `_terms`).
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

    function isVerifier(uint256 jobId, address account) external view returns (bool) {
        return _isVerifier[jobId][account];
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

    /// @dev The checks shared by accept and reject; returns the last accepted step and the
    ///      job's total, which the caller needs too.
    function _checkDecision(
        uint256 jobId,
        Job storage job,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bool accept,
        bytes[] calldata sigs
    ) private view returns (uint64 last, uint64 total) {
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        if (epoch != job.epoch) revert WrongEpoch(epoch, job.epoch);
        if (block.timestamp > uint256(job.deadline) + job.grace) revert TooLate();
        last = job.lastAcceptedStep;
        if (step <= last) revert StepNotIncreasing(step, last);
        total = job.totalSteps;
        if (step > total || (step != total && step % job.checkpointInterval != 0)) revert StepOffInterval(step);
        _checkQuorum(jobId, job.quorum, hashVote(jobId, epoch, step, checkpointHash, accept), sigs);
    }

    /// @dev Every signature must be a valid low-s signature by a distinct listed verifier,
    ///      and there must be at least `quorum` of them.
    function _checkQuorum(uint256 jobId, uint256 quorum, bytes32 digest, bytes[] calldata sigs) private view {
        uint256 n = sigs.length;
        if (n > MAX_VERIFIERS) revert TooManySignatures();
        if (n < quorum) revert QuorumNotReached(n, quorum);
        address[] memory seen = new address[](n);
        for (uint256 i; i < n; ++i) {
            (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, sigs[i]);
            if (err != ECDSA.RecoverError.NoError) revert BadSignature(i);
            if (!_isVerifier[jobId][signer]) revert NotVerifier(signer);
            for (uint256 j; j < i; ++j) {
                if (seen[j] == signer) revert DuplicateSigner(signer);
            }
            seen[i] = signer;
        }
    }

    /// @dev The bid must be a valid low-s signature by `provider` itself.
    function _checkBid(bytes32 digest, address provider, bytes calldata sig) private pure {
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, sig);
        if (err != ECDSA.RecoverError.NoError) revert BadSignature(0);
        if (recovered != provider) revert WrongSigner(recovered, provider);
    }

    function _listVerifiers(uint256 jobId, address[] calldata verifiers) private {
        for (uint256 i; i < verifiers.length; ++i) {
            address v = verifiers[i];
            if (v == address(0) || _isVerifier[jobId][v]) revert InvalidVerifiers();
            if (v == msg.sender) revert ClientIsVerifier();
            _isVerifier[jobId][v] = true;
        }
    }

    /// @dev What a bid signs: everything the client fixed at creation, so a provider's bid
    ///      is good only for the job it read, never for a job with the same id and other
    ///      terms (after a reorg, or shown to it by a dishonest node). The verifier list
    ///      enters as the keccak of its 32-byte-padded entries, in order.
    function _terms(Job storage job, address[] calldata verifiers) private view returns (bytes32) {
        return keccak256(
            abi.encode(
                job.client,
                job.token,
                uint256(job.deposit),
                uint256(job.maxPricePerStep),
                job.totalSteps,
                job.checkpointInterval,
                job.specHash,
                keccak256(abi.encodePacked(verifiers)),
                job.quorum,
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
            job.verifiers,
            job.quorum,
            job.deadline,
            job.grace
        );
    }

    function _endEpoch(uint256 jobId, Job storage job, EndReason reason) private {
        _stakes[job.provider].liveEpochs -= 1;
        emit EpochEnded(jobId, job.epoch, reason);
    }
}
