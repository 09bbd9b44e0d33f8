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
///         assigned price; a rejected checkpoint ends the epoch and slashes the provider's
///         stake to the client. Every payment is pull-based (`withdraw`), and every job can
///         be exited: completion refunds the rest, and after `deadline + grace` anyone may
///         `expire` it.
/// @dev    Verifier fees are not charged for now: verifiers are paid nothing by this
///         contract. Slashing takes `min(stake, minStake)` per rejected epoch and credits all
///         of it to the job's client, in the stake token.
contract JobEscrow is ReentrancyGuardTransient, EIP712 {
    using SafeERC20 for IERC20;

    // ---------------------------------------------------------------- types

    enum Status {
        None,
        Open, // no provider holds the job; the client may assign one
        Assigned, // a provider holds the current epoch
        Completed, // the last step was accepted
        Expired // exited after deadline + grace
    }

    /// @notice Why an epoch ended (the `reason` of `EpochEnded`).
    enum EndReason {
        Replaced, // the client assigned another provider
        Released, // the client ended it without a replacement
        Rejected, // a quorum rejected one of its checkpoints
        Completed, // its checkpoint finished the job
        Expired // the job expired while it was live
    }

    /// @dev Packed so that `acceptCheckpoint` touches few slots.
    struct Job {
        // slot 0
        address client;
        uint64 epoch;
        Status status;
        uint8 quorum;
        // slot 1
        address provider;
        uint64 lastAcceptedStep;
        // slot 2
        address token;
        uint64 totalSteps;
        // slot 3
        uint128 pricePerStep;
        uint128 remaining;
        // slot 4
        uint128 maxPricePerStep;
        uint128 deposit;
        // slot 5
        uint64 checkpointInterval;
        uint64 deadline;
        uint64 grace;
        // slot 6
        bytes32 lastCheckpointHash;
        // slot 7
        bytes32 specHash;
        address[] verifiers;
    }

    /// @notice A job as `getJob` returns it. `remaining` is the budget not yet paid nor
    ///         refunded; `deposit` the budget pulled at creation; `lastCheckpointHash` is the
    ///         last accepted checkpoint, or `specHash` before any.
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
    }

    struct Stake {
        uint128 amount;
        // 0 while bonded; the time the stake can be withdrawn once unbonding
        uint64 unbondAt;
        // epochs this provider currently holds, across jobs
        uint32 liveEpochs;
    }

    // ------------------------------------------------------------ constants

    bytes32 public constant BID_TYPEHASH =
        keccak256("Bid(uint256 jobId,uint64 epoch,address provider,uint256 pricePerStep,uint64 expiry)");
    bytes32 public constant VOTE_TYPEHASH =
        keccak256("Vote(uint256 jobId,uint64 epoch,uint64 step,bytes32 checkpointHash,bool accept)");

    /// @notice Bound on a job's verifier list: quorum checks are quadratic in it.
    uint256 public constant MAX_VERIFIERS = 32;

    // ---------------------------------------------------------------- state

    /// @notice The token every provider stakes in.
    IERC20 public immutable stakeToken;
    /// @notice Stake needed to be assigned, and the most one rejected epoch slashes.
    uint256 public immutable minStake;
    /// @notice Seconds between `requestUnbond` and `withdrawStake`.
    uint64 public immutable unbondDelay;

    uint256 public jobCount;
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
    /// @notice A quorum rejected `step`; the epoch ends and `slashed` stake goes to the client.
    event CheckpointRejected(
        uint256 indexed jobId,
        uint64 indexed epoch,
        uint64 step,
        bytes32 checkpointHash,
        address indexed provider,
        uint256 slashed
    );
    /// @notice The final step was accepted; `refund` was credited to the client.
    event JobCompleted(uint256 indexed jobId, uint256 refund);
    /// @notice The job was exited after deadline + grace; `refund` was credited to the client.
    event JobExpired(uint256 indexed jobId, uint256 refund);
    /// @notice `provider` added `amount` to its stake, now `total`.
    event Staked(address indexed provider, uint256 amount, uint256 total);
    /// @notice `provider` may withdraw its `amount` of stake from `availableAt` on.
    event UnbondRequested(address indexed provider, uint256 amount, uint64 availableAt);
    /// @notice `provider` took its stake back.
    event StakeWithdrawn(address indexed provider, uint256 amount);
    /// @notice `amount` of `provider`'s stake was credited to `beneficiary` (the job's client).
    event Slashed(address indexed provider, uint256 indexed jobId, uint256 amount, address beneficiary);
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
    error BudgetTooSmall(uint256 budget, uint256 needed);
    error DepositMismatch(uint256 received, uint256 expected);
    error UnknownJob(uint256 jobId);
    error NotClient();
    error WrongStatus(Status status);
    error WrongEpoch(uint64 given, uint64 current);
    error BidExpired(uint64 expiry);
    error PriceTooHigh(uint256 price, uint256 maxPrice);
    error InsufficientStake(uint256 stake, uint256 needed);
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
    error UnbondPending();
    error NotUnbonding();
    error LiveEpochs(uint32 count);
    error NothingToWithdraw();

    // ---------------------------------------------------------- constructor

    constructor(IERC20 stakeToken_, uint256 minStake_, uint64 unbondDelay_) EIP712("GpuChain JobEscrow", "1") {
        if (address(stakeToken_) == address(0)) revert ZeroAddress();
        if (minStake_ == 0) revert ZeroAmount();
        stakeToken = stakeToken_;
        minStake = minStake_;
        unbondDelay = unbondDelay_;
    }

    // ----------------------------------------------------------------- jobs

    /// @notice Opens a job and pulls `budget` of `token` from the caller (approve first).
    ///         The budget must cover every step at the maximum price, so no accepted
    ///         checkpoint can ever be short of funds.
    /// @param verifiers distinct, non-zero; `quorum` of them must sign each decision.
    /// @param deadline  no assignment after it; `expire` is open from `deadline + grace`.
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
        if (verifiers.length == 0 || verifiers.length > MAX_VERIFIERS) revert InvalidVerifiers();
        if (quorum == 0 || quorum > verifiers.length) revert InvalidQuorum();
        if (deadline <= block.timestamp) revert DeadlinePassed();
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
        _emitCreated(jobId, job);

        _pullExact(token, budget);
    }

    /// @notice Client only. Opens epoch `current + 1` for `provider` at `pricePerStep`,
    ///         starting from the last accepted step and checkpoint, and ends the current
    ///         epoch if one is live (its unaccepted steps are never paid).
    /// @param bidSig the provider's EIP-712 `Bid` for exactly this job, epoch, price and expiry.
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

        Stake storage st = _stakes[provider];
        if (st.unbondAt != 0) revert UnbondPending();
        if (st.amount < minStake) revert InsufficientStake(st.amount, minStake);

        uint64 newEpoch = job.epoch + 1;
        bytes32 digest = hashBid(jobId, newEpoch, provider, pricePerStep, bidExpiry);
        (address recovered, ECDSA.RecoverError err,) = ECDSA.tryRecover(digest, bidSig);
        if (err != ECDSA.RecoverError.NoError) revert BadSignature(0);
        if (recovered != provider) revert WrongSigner(recovered, provider);

        if (status == Status.Assigned) _endEpoch(jobId, job, EndReason.Replaced);

        job.epoch = newEpoch;
        job.provider = provider;
        job.pricePerStep = uint128(pricePerStep);
        job.status = Status.Assigned;
        st.liveEpochs += 1;

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

    /// @notice Anyone may submit a quorum of accept `Vote`s for the current epoch's checkpoint
    ///         at `step` (strictly after the last accepted one; on the interval or the final
    ///         step). Credits the provider `(step - lastAccepted) * price`; the final step
    ///         completes the job and credits the rest of the budget to the client.
    function acceptCheckpoint(
        uint256 jobId,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bytes[] calldata sigs
    ) external nonReentrant {
        Job storage job = _existing(jobId);
        uint64 last = _checkDecision(jobId, job, epoch, step, checkpointHash, true, sigs);

        address provider = job.provider;
        address token = job.token;
        // price ≤ maxPrice and budget ≥ maxPrice × totalSteps, so `remaining` always covers this
        uint128 amount = uint128(step - last) * job.pricePerStep;
        uint128 remaining = job.remaining - amount;
        job.lastAcceptedStep = step;
        job.lastCheckpointHash = checkpointHash;
        _withdrawable[provider][token] += amount;
        emit CheckpointAccepted(jobId, epoch, step, checkpointHash, provider, amount);

        if (step == job.totalSteps) {
            job.remaining = 0;
            job.status = Status.Completed;
            _stakes[provider].liveEpochs -= 1;
            _withdrawable[job.client][token] += remaining;
            emit EpochEnded(jobId, epoch, EndReason.Completed);
            emit JobCompleted(jobId, remaining);
        } else {
            job.remaining = remaining;
        }
    }

    /// @notice Anyone may submit a quorum of reject `Vote`s for a checkpoint of the current
    ///         epoch: the epoch ends, the provider is slashed `min(stake, minStake)` to the
    ///         client (in the stake token), and the job is open for a new assignment.
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
        uint128 slashed = st.amount < minStake ? st.amount : uint128(minStake);
        st.amount -= slashed;
        address client = job.client;
        _withdrawable[client][address(stakeToken)] += slashed;

        emit CheckpointRejected(jobId, epoch, step, checkpointHash, provider, slashed);
        emit Slashed(provider, jobId, slashed, client);
        _endEpoch(jobId, job, EndReason.Rejected);
        job.status = Status.Open;
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

    /// @notice Adds `amount` of the stake token to the caller's stake (approve first).
    function register(uint256 amount) external nonReentrant {
        if (amount == 0) revert ZeroAmount();
        Stake storage st = _stakes[msg.sender];
        if (st.unbondAt != 0) revert UnbondPending();
        uint256 total = st.amount + amount;
        if (total > type(uint128).max) revert AmountTooLarge();
        st.amount = uint128(total);
        emit Staked(msg.sender, amount, total);

        _pullExact(stakeToken, amount);
    }

    /// @notice Starts the unbonding delay for the caller's whole stake. Not while the caller
    ///         holds a live epoch; an unbonding provider cannot be assigned.
    function requestUnbond() external {
        Stake storage st = _stakes[msg.sender];
        if (st.amount == 0) revert ZeroAmount();
        if (st.unbondAt != 0) revert UnbondPending();
        if (st.liveEpochs != 0) revert LiveEpochs(st.liveEpochs);
        uint64 availableAt = uint64(block.timestamp) + unbondDelay;
        st.unbondAt = availableAt;
        emit UnbondRequested(msg.sender, st.amount, availableAt);
    }

    /// @notice Pays the caller's stake out once the unbonding delay has passed.
    function withdrawStake() external nonReentrant {
        Stake storage st = _stakes[msg.sender];
        uint64 unbondAt = st.unbondAt;
        if (unbondAt == 0) revert NotUnbonding();
        if (block.timestamp < unbondAt) revert TooEarly(unbondAt);
        uint256 amount = st.amount;
        st.amount = 0;
        st.unbondAt = 0;
        emit StakeWithdrawn(msg.sender, amount);
        if (amount != 0) stakeToken.safeTransfer(msg.sender, amount);
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
    }

    function withdrawable(address account, IERC20 token) external view returns (uint256) {
        return _withdrawable[account][address(token)];
    }

    /// @return amount staked, `unbondAt` (0 while bonded) and the number of live epochs held.
    function stakeOf(address provider) external view returns (uint256 amount, uint64 unbondAt, uint32 liveEpochs) {
        Stake storage st = _stakes[provider];
        return (st.amount, st.unbondAt, st.liveEpochs);
    }

    function isVerifier(uint256 jobId, address account) external view returns (bool) {
        return _isVerifier[jobId][account];
    }

    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    /// @return the EIP-712 digest a provider signs for a `Bid`.
    function hashBid(uint256 jobId, uint64 epoch, address provider, uint256 pricePerStep, uint64 expiry)
        public
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(BID_TYPEHASH, jobId, epoch, provider, pricePerStep, expiry)));
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

    /// @dev The checks shared by accept and reject; returns the last accepted step.
    function _checkDecision(
        uint256 jobId,
        Job storage job,
        uint64 epoch,
        uint64 step,
        bytes32 checkpointHash,
        bool accept,
        bytes[] calldata sigs
    ) private view returns (uint64 last) {
        if (job.status != Status.Assigned) revert WrongStatus(job.status);
        if (epoch != job.epoch) revert WrongEpoch(epoch, job.epoch);
        if (block.timestamp > uint256(job.deadline) + job.grace) revert TooLate();
        last = job.lastAcceptedStep;
        if (step <= last) revert StepNotIncreasing(step, last);
        uint64 total = job.totalSteps;
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

    function _listVerifiers(uint256 jobId, address[] calldata verifiers) private {
        for (uint256 i; i < verifiers.length; ++i) {
            address v = verifiers[i];
            if (v == address(0) || _isVerifier[jobId][v]) revert InvalidVerifiers();
            _isVerifier[jobId][v] = true;
        }
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
