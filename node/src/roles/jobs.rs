//! Jobs as the node runs them: the job file a client submits, the protocol `JobSpec` it
//! becomes, the trainer's `TrainSpec` every provider and verifier derives from that spec,
//! and the job's data, fetched as blobs and unpacked once per spec.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use gpuchain_protocol::spec::{HyperParams, ModelKind, QualityThresholds};
use gpuchain_protocol::{Hash, JobSpec};
use gpuchain_trainer::data::bundle;
use gpuchain_trainer::{EvalReport, Job, ModelSpec, OptimSpec, QualitySpec, TrainSpec};
use serde::Deserialize;
use tokio::sync::{Mutex, OnceCell};

use super::text_job::{self, TextFile};
use crate::blobs::BlobNode;
use crate::events::NodeEvent;

/// The `model_blob` of a fashion-cnn job: the architecture is built into the trainer, so
/// the blob only names it (a provider that fetched something else refuses the job).
pub const FASHION_CNN_MODEL: &[u8] = b"gpuchain-model/fashion-cnn/v1\n";
/// Where Debian's `dataset-fashion-mnist` package puts the files (`scripts/setup` installs it).
pub const DEFAULT_FASHION_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// Overrides [`DEFAULT_FASHION_DIR`], as for the trainer's own tests.
pub const FASHION_DIR_ENV: &str = "GPUCHAIN_FASHION_MNIST_DIR";

/// The job file (`gpuchain job submit --spec job.toml`). Everything but the step counts has
/// a default that reproduces the product page's fashion-cnn run; a `bert-lora` job describes
/// its model and classes in `[text]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub model: ModelKind,
    /// Folder with the data set's files (Fashion-MNIST's `.gz` files; for `bert-lora` the
    /// fortune category files); relative paths are relative to the job file.
    pub data_dir: Option<PathBuf>,
    #[serde(default = "default_seed")]
    pub seed: u64,
    pub total_steps: u64,
    pub checkpoint_interval: u64,
    #[serde(default = "default_batch")]
    pub effective_batch: u32,
    #[serde(default = "default_memory_mb")]
    pub min_memory_mb: u64,
    /// Test images the quality test scores (the first ones of the test split).
    #[serde(default = "default_eval_examples")]
    pub eval_examples: u64,
    #[serde(default)]
    pub hyper: HyperFile,
    #[serde(default)]
    pub quality: QualityFile,
    /// `bert-lora` only: base model, LoRA, sequence length, categories.
    pub text: Option<TextFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HyperFile {
    pub learning_rate: f64,
    pub weight_decay: f64,
    /// Default: 5 % of the steps.
    pub warmup_steps: Option<u64>,
    /// The cosine decay ends at this fraction of the peak rate (1.0 = constant).
    pub min_lr_ratio: f64,
}

impl Default for HyperFile {
    fn default() -> Self {
        Self {
            learning_rate: 3e-3,
            weight_decay: 0.01,
            warmup_steps: None,
            min_lr_ratio: 0.05,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QualityFile {
    pub min_accuracy: f64,
    pub after_step: u64,
    pub max_accuracy_drop: f64,
    pub max_loss: f64,
    pub spot_check_steps: u32,
}

impl Default for QualityFile {
    fn default() -> Self {
        Self {
            min_accuracy: 0.5,
            after_step: 100,
            max_accuracy_drop: 0.05,
            max_loss: 10.0,
            spot_check_steps: 2,
        }
    }
}

fn default_seed() -> u64 {
    4
}
fn default_batch() -> u32 {
    64
}
fn default_memory_mb() -> u64 {
    256
}
fn default_eval_examples() -> u64 {
    2000
}

/// The job's three blobs, ready to add to the client's store.
pub struct JobBlobs {
    pub model: Vec<u8>,
    pub train: Vec<u8>,
    pub eval: Vec<u8>,
}

impl std::fmt::Debug for JobBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBlobs")
            .field("model", &self.model.len())
            .field("train", &self.train.len())
            .field("eval", &self.eval.len())
            .finish()
    }
}

impl JobFile {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the job file {}: check the --spec path",
                path.display()
            )
        })?;
        Self::parse(&text).map_err(|e| anyhow!("job file {}: {e:#}", path.display()))
    }

    /// Parses a job file's text (the TOML only: [`JobFile::spec_for`] checks what it says).
    pub fn parse(text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| anyhow!("not valid: {}", e.to_string().trim_end()))
    }

    fn data_dir(&self, job_file: &Path) -> PathBuf {
        match &self.data_dir {
            Some(d) if d.is_absolute() => d.clone(),
            Some(d) => job_file.parent().unwrap_or(Path::new(".")).join(d),
            None if self.model == ModelKind::BertLora => {
                gpuchain_trainer::data::fortunes::fortunes_dir()
            }
            None => std::env::var_os(FASHION_DIR_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_FASHION_DIR)),
        }
    }

    /// Packs the data and builds the spec naming it. Fails on anything the trainer would
    /// refuse later, so a bad job never reaches the chain.
    pub fn build(&self, job_file: &Path) -> Result<(JobSpec, JobBlobs)> {
        // Before packing, which reads the whole data set.
        self.sections_fit()
            .map_err(|e| anyhow!("job file {}: {e}", job_file.display()))?;
        let dir = self.data_dir(job_file);
        let (blobs, extra) = match (self.model, &self.text) {
            (ModelKind::FashionCnn, _) => {
                let train = bundle::pack_dir_files(&dir, &bundle::FASHION_TRAIN_FILES)
                    .map_err(|e| anyhow!("job data in {}: {e}", dir.display()))?;
                let eval = bundle::pack_dir_files(&dir, &bundle::FASHION_EVAL_FILES)
                    .map_err(|e| anyhow!("job data in {}: {e}", dir.display()))?;
                let blobs = JobBlobs {
                    model: FASHION_CNN_MODEL.to_vec(),
                    train,
                    eval,
                };
                (blobs, BTreeMap::new())
            }
            (ModelKind::BertLora, text) => {
                let p = text
                    .clone()
                    .unwrap_or_default()
                    .pack(&dir, job_file)
                    .map_err(|e| anyhow!("job file {}: {e:#}", job_file.display()))?;
                let blobs = JobBlobs {
                    model: p.model,
                    train: p.train,
                    eval: p.eval,
                };
                (blobs, p.extra)
            }
        };
        let spec = self
            .spec_for(&blobs, extra)
            .map_err(|e| anyhow!("job file {}: {e:#}", job_file.display()))?;
        Ok((spec, blobs))
    }

    /// The file's sections belong to its model.
    fn sections_fit(&self) -> Result<()> {
        if self.model == ModelKind::FashionCnn && self.text.is_some() {
            bail!("a [text] section belongs to a bert-lora job, not fashion-cnn");
        }
        Ok(())
    }

    /// The spec naming `blobs`, with the model's `hyper.extra` from packing (empty for
    /// fashion-cnn, [`TextFile::hyper_extra`] for bert-lora), refused as
    /// [`JobFile::build`] refuses it: anything the protocol or the trainer would refuse later.
    pub fn spec_for(&self, blobs: &JobBlobs, mut extra: BTreeMap<String, f64>) -> Result<JobSpec> {
        self.sections_fit()?;
        extra.insert("min_lr_ratio".to_string(), self.hyper.min_lr_ratio);
        extra.insert("eval_examples".to_string(), self.eval_examples as f64);
        let spec = JobSpec {
            model: self.model,
            model_blob: blake3_of(&blobs.model),
            dataset_blob: blake3_of(&blobs.train),
            eval_blob: blake3_of(&blobs.eval),
            hyper: HyperParams {
                learning_rate: self.hyper.learning_rate,
                weight_decay: self.hyper.weight_decay,
                warmup_steps: self.hyper.warmup_steps.unwrap_or(self.total_steps / 20),
                extra,
            },
            seed: self.seed,
            total_steps: self.total_steps,
            checkpoint_interval: self.checkpoint_interval,
            effective_batch: self.effective_batch,
            min_memory_bytes: self.min_memory_mb << 20,
            quality: QualityThresholds {
                min_accuracy: self.quality.min_accuracy,
                after_step: self.quality.after_step,
                max_accuracy_drop: self.quality.max_accuracy_drop,
                max_loss: self.quality.max_loss,
                spot_check_steps: self.quality.spot_check_steps,
                spot_check_tolerance: 0.0,
            },
        };
        spec.check().map_err(|e| anyhow!("{e}"))?;
        train_spec(&spec)?.validate().map_err(|e| anyhow!("{e}"))?;
        Ok(spec)
    }
}

pub fn blake3_of(bytes: &[u8]) -> Hash {
    Hash::from(*blake3::hash(bytes).as_bytes())
}

pub fn to_iroh(h: Hash) -> iroh_blobs::Hash {
    iroh_blobs::Hash::from_bytes(h.0)
}

pub fn from_iroh(h: iroh_blobs::Hash) -> Hash {
    Hash::from(*h.as_bytes())
}

/// The `hyper.extra` keys of every job.
const COMMON_EXTRA: [&str; 2] = ["min_lr_ratio", "eval_examples"];

/// The trainer's view of a protocol spec. Every provider and verifier derives it the same
/// way, so checkpoints carry the same fingerprint.
pub fn train_spec(spec: &JobSpec) -> Result<TrainSpec> {
    let extra = &spec.hyper.extra;
    let model = match spec.model {
        ModelKind::FashionCnn => ModelSpec::FashionCnn,
        ModelKind::BertLora => {
            // Anything else in `extra` would change the spec hash without changing the
            // training: two jobs that train the same would look different.
            let known: Vec<&str> = COMMON_EXTRA
                .into_iter()
                .chain(text_job::known_keys())
                .collect();
            if let Some(k) = extra.keys().find(|k| !known.contains(&k.as_str())) {
                bail!("the bert-lora job's hyper-parameter {k:?} is not one this node knows");
            }
            text_job::model_spec(extra, spec.model_blob, spec.seed)?
        }
    };
    let eval_examples = extra.get("eval_examples").copied().unwrap_or(2000.0);
    if !(1.0..=1e7).contains(&eval_examples) {
        bail!("the job's eval_examples ({eval_examples}) must be between 1 and 10 million");
    }
    Ok(TrainSpec {
        job_id: hex::encode(spec.spec_hash()),
        model,
        seed: spec.seed,
        total_steps: spec.total_steps,
        effective_batch: spec.effective_batch as usize,
        optim: OptimSpec {
            peak_lr: spec.hyper.learning_rate,
            warmup_steps: spec.hyper.warmup_steps,
            min_lr_ratio: extra.get("min_lr_ratio").copied().unwrap_or(1.0),
            weight_decay: spec.hyper.weight_decay,
            ..OptimSpec::default()
        },
        quality: QualitySpec {
            min_accuracy: spec.quality.min_accuracy,
            max_loss: spec.quality.max_loss,
            max_regression: spec.quality.max_accuracy_drop,
            eval_examples: eval_examples as usize,
        },
    })
}

/// Whether this node's trainer can train `spec`'s model in `memory_bytes` with at least one
/// example a micro-batch: the provider machine's [`gpuchain_protocol::provider::MemoryFit`],
/// so a provider too small for a job does not bid on it, and says why with the figures. The
/// trainer plans from the same figures when it starts ([`gpuchain_trainer::plan_for_memory`]).
/// A spec this node cannot map, or a pretrained encoder whose size is only in its weights,
/// is not refused here: training such a job fails at its start with the trainer's reason.
pub fn memory_fit(spec: &JobSpec, memory_bytes: u64) -> std::result::Result<(), String> {
    let Ok(t) = train_spec(spec) else {
        return Ok(());
    };
    match gpuchain_trainer::memory_need(&t.model, t.seed) {
        Ok(Some(need)) => gpuchain_trainer::plan_for_memory(t.effective_batch, need, memory_bytes)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Ok(None) | Err(_) => Ok(()),
    }
}

/// Where a job's model blob is unpacked, under its data folder (the data bundles hold plain
/// file names, so they cannot reach into it).
const MODEL_SUBDIR: &str = "model";

/// Specs seen (offers, own submissions) by spec hash, which of them the chain has jobs for,
/// and jobs built from fetched data. Shared by the runtime and its tasks; the machines' outputs
/// name the spec hash they need, so nothing here maps jobs to specs.
#[derive(Default)]
pub struct JobLibrary {
    specs: std::sync::Mutex<HashMap<Hash, JobSpec>>,
    on_chain: std::sync::Mutex<std::collections::HashSet<Hash>>,
    /// Jobs built or being built, least recently asked for first. Each spec has its own
    /// cell, so building one job (a bid's prefetch) never holds up another (an assignment).
    built: Mutex<Vec<(Hash, BuiltJob)>>,
    /// Scores of checkpoints this node's quality tests measured, by (spec, checkpoint) hash,
    /// oldest first. The next test's baseline is the checkpoint a verifier last accepted, which
    /// it scored then: scoring it again would double the test. A score is a function of the
    /// job and the checkpoint's bytes, which their hashes name, so a hit is never stale.
    evals: std::sync::Mutex<std::collections::VecDeque<((Hash, Hash), EvalReport)>>,
}

/// One spec's job: built once, by whichever caller comes first.
type BuiltJob = Arc<OnceCell<Arc<Job>>>;

/// Specs remembered from gossip; an offer flood cannot grow memory beyond this.
const MAX_SPECS: usize = 1024;

/// Jobs kept loaded (a Fashion-MNIST job holds 55 MB of images, a MiniLM one its weights):
/// a provider prepares every job it bids on, so the oldest are dropped past this. A job in
/// use stays alive with its users; asked for again, it is built again from the blob store.
const MAX_BUILT: usize = 4;

/// Scores kept: a few per job is all a baseline lookup needs.
const MAX_EVALS: usize = 64;

impl JobLibrary {
    pub fn remember_spec(&self, spec: &JobSpec) {
        let mut specs = self.specs.lock().unwrap_or_else(|p| p.into_inner());
        if specs.len() >= MAX_SPECS {
            // Keep the ones the chain confirmed; forget gossip-only ones.
            let on_chain = self.on_chain.lock().unwrap_or_else(|p| p.into_inner());
            specs.retain(|h, _| on_chain.contains(h));
        }
        specs.insert(spec.spec_hash(), spec.clone());
    }

    /// A job with this spec exists on chain: its spec outlives the gossip-only ones.
    pub fn keep_spec(&self, spec_hash: Hash) {
        self.on_chain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(spec_hash);
    }

    /// The spec, if the chain has a job for it and this node knows it.
    pub fn spec_on_chain(&self, spec_hash: Hash) -> Option<JobSpec> {
        let on_chain = self
            .on_chain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&spec_hash);
        on_chain.then(|| self.spec(spec_hash)).flatten()
    }

    pub fn spec(&self, spec_hash: Hash) -> Option<JobSpec> {
        self.specs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&spec_hash)
            .cloned()
    }

    /// The score this node measured for `checkpoint` of the job `spec_hash`, if it still has it.
    pub fn eval(&self, spec_hash: Hash, checkpoint: Hash) -> Option<EvalReport> {
        self.evals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(k, _)| *k == (spec_hash, checkpoint))
            .map(|(_, r)| *r)
    }

    pub fn remember_eval(&self, spec_hash: Hash, checkpoint: Hash, report: EvalReport) {
        let mut evals = self.evals.lock().unwrap_or_else(|p| p.into_inner());
        let key = (spec_hash, checkpoint);
        evals.retain(|(k, _)| *k != key);
        if evals.len() >= MAX_EVALS {
            evals.pop_front();
        }
        evals.push_back((key, report));
    }

    /// The job ready to train or verify: its blobs fetched (from anyone who has them),
    /// checked against the spec, unpacked under `data_dir/jobs/<spec hash>/`, loaded once.
    /// Callers asking for the same spec at once share one build; a failed build is tried
    /// again by the next caller.
    pub async fn prepare(
        &self,
        spec: &JobSpec,
        blobs: &crate::handle::NodeHandle,
        data_dir: &Path,
    ) -> Result<Arc<Job>> {
        let spec_hash = spec.spec_hash();
        let cell = {
            let mut built = self.built.lock().await;
            let cell = match built.iter().position(|(h, _)| *h == spec_hash) {
                Some(i) => built.remove(i).1,
                None => Arc::new(OnceCell::new()),
            };
            built.push((spec_hash, cell.clone()));
            // The oldest built one goes; one still building stays (dropping it could start a
            // second build unpacking into the same folder).
            if built.len() > MAX_BUILT
                && let Some(i) = built.iter().position(|(_, c)| c.initialized())
            {
                built.remove(i);
            }
            cell
        };
        cell.get_or_try_init(|| build(spec, blobs, data_dir))
            .await
            .cloned()
    }

    /// [`Self::prepare`] ahead of need (a provider that bid on the job): a failure is only
    /// logged, since the start of training prepares the job again and reports it then.
    pub async fn prefetch(
        &self,
        spec_hash: Hash,
        blobs: &crate::handle::NodeHandle,
        data_dir: &Path,
    ) {
        let Some(spec) = self.spec(spec_hash) else {
            return;
        };
        // A standby bid on a job already loaded: nothing to do, nothing to report.
        if self
            .built
            .lock()
            .await
            .iter()
            .any(|(h, c)| *h == spec_hash && c.initialized())
        {
            return;
        }
        let started = std::time::Instant::now();
        match self.prepare(&spec, blobs, data_dir).await {
            Ok(_) => crate::events::emit(
                NodeEvent::JobPrepared {
                    spec_hash: spec_hash.to_string(),
                    ms: started.elapsed().as_millis() as u64,
                },
                "job data ready ahead of an assignment",
            ),
            Err(e) => {
                tracing::debug!(spec = %spec_hash, error = %format!("{e:#}"), "preparing job data ahead failed")
            }
        }
    }
}

/// Fetches, checks, unpacks and loads one job (see [`JobLibrary::prepare`]).
async fn build(
    spec: &JobSpec,
    blobs: &crate::handle::NodeHandle,
    data_dir: &Path,
) -> Result<Arc<Job>> {
    let unpacked = crate::datadir::job_dir(data_dir, spec.spec_hash().as_slice());
    let job = unpack_and_load(spec, blobs, data_dir).await;
    // Loaded (or failed): the unpacked files are never read again, and a provider prepares
    // every job it bids on, so keeping them would grow its disk with each bid. A later build
    // unpacks again from the blob store.
    let gone = unpacked.clone();
    let removed = tokio::task::spawn_blocking(move || {
        if gone.exists() {
            std::fs::remove_dir_all(&gone)
        } else {
            Ok(())
        }
    })
    .await;
    if let Ok(Err(e)) | Err(e) = removed.map_err(std::io::Error::other) {
        tracing::warn!(dir = %unpacked.display(), error = %e, "cannot remove unpacked job data");
    }
    job.map(Arc::new)
}

async fn unpack_and_load(
    spec: &JobSpec,
    blobs: &crate::handle::NodeHandle,
    data_dir: &Path,
) -> Result<Job> {
    let spec_hash = spec.spec_hash();
    let tspec = train_spec(spec)?;
    let model = fetch_bytes(blobs, spec.model_blob).await?;
    let dir = crate::datadir::job_data_dir(data_dir, spec_hash.as_slice());
    let model_dir = dir.join(MODEL_SUBDIR);
    match spec.model {
        ModelKind::FashionCnn if model != FASHION_CNN_MODEL => {
            bail!("the job's model blob is not the fashion-cnn descriptor this node knows")
        }
        ModelKind::FashionCnn => {}
        ModelKind::BertLora => {
            let to = model_dir.clone();
            crate::compute::run("job-unpack", move || bundle::unpack_to_dir(&model, &to))
                .await?
                .map_err(|e| anyhow!("the job's model blob is malformed: {e}"))?;
        }
    }
    for blob in [spec.dataset_blob, spec.eval_blob] {
        let bytes = fetch_bytes(blobs, blob).await?;
        let dir = dir.clone();
        crate::compute::run("job-unpack", move || bundle::unpack_to_dir(&bytes, &dir))
            .await?
            .map_err(|e| anyhow!("the job's data blob {blob} is malformed: {e}"))?;
    }
    // Decoding a data set is compute: below the runtime's priority, like training (a bid's
    // prefetch runs beside another job's training and its heartbeats).
    crate::compute::run("job-load", move || -> Result<Job> {
        let device = gpuchain_trainer::DeviceChoice::Cpu.open()?;
        Ok(match tspec.model {
            ModelSpec::BertLora { .. } => Job::bert_lora_dirs(tspec, &model_dir, &dir, device)?,
            _ => Job::fashion(tspec, &dir, device)?,
        })
    })
    .await?
}

/// A blob's bytes, fetched from any peer that has it when we do not.
pub async fn fetch_bytes(handle: &crate::handle::NodeHandle, hash: Hash) -> Result<Vec<u8>> {
    let blobs: &BlobNode = handle.blobs();
    let h = to_iroh(hash);
    if blobs.complete_size(h).await?.is_none() {
        handle.fetch_hash(h, Vec::new()).await?;
    }
    blobs.read(h).await
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const JOB_KEYS: &[&str] = &["seed", "effective_batch", "min_memory_mb", "eval_examples"];

    #[test]
    fn scores_are_kept_by_job_and_checkpoint_and_the_oldest_go_first() {
        let lib = JobLibrary::default();
        let score = |n: usize| EvalReport {
            accuracy: n as f64 / 1000.0,
            loss: 1.0,
            examples: n,
        };
        let (spec, other) = (Hash::from([1; 32]), Hash::from([2; 32]));
        let ckpt = |n: usize| Hash::from(*blake3::hash(&n.to_le_bytes()).as_bytes());
        lib.remember_eval(spec, ckpt(0), score(0));
        assert_eq!(lib.eval(spec, ckpt(0)), Some(score(0)));
        // The same checkpoint of another job is another score.
        assert_eq!(lib.eval(other, ckpt(0)), None);
        // Scored again: one entry, the newest.
        lib.remember_eval(spec, ckpt(0), score(7));
        for n in 1..MAX_EVALS {
            lib.remember_eval(spec, ckpt(n), score(n));
        }
        assert_eq!(lib.eval(spec, ckpt(0)), Some(score(7)));
        lib.remember_eval(spec, ckpt(MAX_EVALS), score(MAX_EVALS));
        assert_eq!(lib.eval(spec, ckpt(0)), None, "the oldest went");
        assert_eq!(lib.eval(spec, ckpt(1)), Some(score(1)));
        assert_eq!(lib.eval(spec, ckpt(MAX_EVALS)), Some(score(MAX_EVALS)));
    }

    fn edge() -> impl Strategy<Value = i128> {
        prop_oneof![
            Just(0i128),
            Just(1),
            Just(7),
            Just(-1),
            Just(i128::from(u64::MAX)),
            0i128..1000
        ]
    }

    proptest! {
        // Each accepted file packs the real data set: few cases.
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// A job file is refused with an error or builds a spec the trainer takes; whatever
        /// numbers it holds, nothing panics on the way (a provider runs `train_spec` on
        /// every spec it is offered).
        #[test]
        fn any_job_file_is_refused_or_builds_a_trainable_spec(
            model in prop_oneof![Just("fashion-cnn"), Just("mlp"), Just("bert-lora"), Just("nope")],
            steps in edge(),
            interval in edge(),
            rest in prop_oneof![
                2 => Just(String::new()),
                1 => crate::config::tests::toml_lines(JOB_KEYS),
            ],
        ) {
            let dir = tempfile::tempdir().expect("tmp");
            let p = write(
                dir.path(),
                &format!("model = {model:?}\ntotal_steps = {steps}\ncheckpoint_interval = {interval}\n{rest}"),
            );
            if let Ok(file) = JobFile::load(&p)
                && let Ok((spec, _)) = file.build(&p)
            {
                let _ = train_spec(&spec);
                prop_assert!(spec.total_steps > 0 && spec.checkpoint_interval > 0);
            }
        }
    }

    proptest! {
        // No data packed: the file's text and the spec it names, many cases.
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any job file text is refused or names a spec that passes the protocol's checks,
        /// round-trips through CBOR and gives a trainer spec that validates (the fuzz target
        /// `job_toml` checks the same over long runs).
        #[test]
        fn any_job_text_is_refused_or_names_a_valid_spec(
            model in prop_oneof![Just("fashion-cnn".to_string()), Just("bert-lora".to_string()), "[a-z-]{0,10}"],
            steps in edge(),
            interval in edge(),
            rest in crate::config::tests::toml_lines(JOB_KEYS),
            text in prop_oneof![
                3 => Just(String::new()),
                1 => Just("[text]\nbase = \"tiny\"\n".to_string()),
                1 => Just("[text]\ntargets = []\n".to_string()),
                1 => Just("[text]\nrank = 0\nmax_len = 100000\n".to_string()),
            ],
        ) {
            let toml = format!(
                "model = {model:?}\ntotal_steps = {steps}\ncheckpoint_interval = {interval}\n{rest}\n{text}"
            );
            if let Ok(file) = JobFile::parse(&toml) {
                let blobs = JobBlobs { model: vec![1], train: vec![2], eval: vec![3] };
                let extra = match file.model {
                    ModelKind::BertLora => file.text.clone().unwrap_or_default().hyper_extra(),
                    ModelKind::FashionCnn => Ok(BTreeMap::new()),
                };
                if let Ok(spec) = extra.and_then(|x| file.spec_for(&blobs, x)) {
                    prop_assert!(spec.check().is_ok());
                    let back = JobSpec::from_cbor(&spec.to_cbor()).expect("decodes");
                    prop_assert_eq!(back.spec_hash(), spec.spec_hash());
                    prop_assert!(train_spec(&back).expect("trainer spec").validate().is_ok());
                }
            }
        }

        /// Any bytes as an offer's spec: decoded or refused, and a decoded one gives a
        /// trainer spec or an error, never a panic.
        #[test]
        fn any_bytes_as_an_offered_spec_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(spec) = JobSpec::from_cbor(&bytes)
                && let Ok(t) = train_spec(&spec)
            {
                let _ = t.validate();
            }
        }
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("job.toml");
        std::fs::write(&p, text).expect("write job file");
        p
    }

    #[test]
    fn job_file_builds_a_spec_whose_blobs_are_the_packed_data() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "model = \"fashion-cnn\"\ntotal_steps = 40\ncheckpoint_interval = 10\n",
        );
        let file = JobFile::load(&p).expect("load");
        let (spec, blobs) = file.build(&p).expect("build");
        assert_eq!(spec.model_blob, blake3_of(&blobs.model));
        assert_eq!(spec.dataset_blob, blake3_of(&blobs.train));
        assert_eq!(spec.eval_blob, blake3_of(&blobs.eval));
        assert_eq!(spec.hyper.warmup_steps, 2);
        let t = train_spec(&spec).expect("train spec");
        assert_eq!(t.job_id, hex::encode(spec.spec_hash()));
        assert_eq!(t.optim.min_lr_ratio, 0.05);
        assert_eq!(t.quality.eval_examples, 2000);
    }

    /// The shipped tiny text job packs the fortunes set, its blobs unpack into a job the
    /// trainer runs, and the spec every node derives from it is the same.
    #[test]
    fn text_job_file_builds_blobs_a_provider_can_train_on() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testnet/scenarios/jobs/text-tiny-80.toml");
        let (spec, blobs) = JobFile::load(&p).and_then(|f| f.build(&p)).expect("build");
        assert_eq!(spec.model, ModelKind::BertLora);
        assert_eq!(spec.model_blob, blake3_of(&blobs.model));
        let t = train_spec(&spec).expect("train spec");
        assert_eq!(t, train_spec(&spec).expect("again"));
        let ModelSpec::BertLora {
            num_classes,
            max_len,
            rank,
            ..
        } = &t.model
        else {
            panic!("not bert-lora: {:?}", t.model);
        };
        assert_eq!((*num_classes, *max_len, *rank), (4, 32, 4));
        // The targets listed in another order make the same job.
        let text = std::fs::read_to_string(&p).expect("job file");
        let dir0 = tempfile::tempdir().expect("tmp");
        let flipped = write(
            dir0.path(),
            &text.replace(
                "targets = [\"query\", \"value\"]",
                "targets = [\"value\", \"query\"]",
            ),
        );
        assert_ne!(text, std::fs::read_to_string(&flipped).expect("flipped"));
        let (again, _) = JobFile::load(&flipped)
            .and_then(|f| f.build(&flipped))
            .expect("build");
        assert_eq!(again.spec_hash(), spec.spec_hash());

        let dir = tempfile::tempdir().expect("tmp");
        let model_dir = dir.path().join(MODEL_SUBDIR);
        bundle::unpack_to_dir(&blobs.model, &model_dir).expect("model");
        bundle::unpack_to_dir(&blobs.train, dir.path()).expect("train");
        bundle::unpack_to_dir(&blobs.eval, dir.path()).expect("eval");
        let cpu = gpuchain_trainer::DeviceChoice::Cpu.open().expect("cpu");
        let job = Job::bert_lora_dirs(t, &model_dir, dir.path(), cpu).expect("job");
        assert!(job.train.len() > 2000 && job.eval.len() > 200);
        let job = Arc::new(job);
        let opts = gpuchain_trainer::TrainerOptions::default;
        let mut straight = gpuchain_trainer::Trainer::new(job.clone(), 1, opts()).expect("trainer");
        // Half the job is enough to see it learn and to resume across a checkpoint.
        const STEPS: u64 = 40;
        let started = std::time::Instant::now();
        for _ in 0..STEPS {
            straight.step().expect("step");
        }
        let took = started.elapsed();
        let e = straight.evaluate().expect("eval");
        println!(
            "tiny text job: {} steps in {took:?}, held-out accuracy {:.3} loss {:.3} on {}",
            STEPS, e.accuracy, e.loss, e.examples
        );
        assert!(e.loss.is_finite() && e.accuracy > 0.2, "{e:?}");

        // A replacement resumes from the checkpoint of step 20 and lands on the same state.
        let mut first = gpuchain_trainer::Trainer::new(job.clone(), 1, opts()).expect("trainer");
        for _ in 0..20 {
            first.step().expect("step");
        }
        let bytes = first
            .checkpoint()
            .and_then(|c| c.to_bytes())
            .expect("checkpoint");
        let mut second = gpuchain_trainer::Trainer::resume(job, &bytes, 2, opts()).expect("resume");
        while second.step_count() < STEPS {
            second.step().expect("step");
        }
        assert_eq!(
            second.state_hash().expect("hash"),
            straight.state_hash().expect("hash")
        );
    }

    /// The default text job: the pretrained all-MiniLM-L6-v2 that setup installs travels as
    /// the model blob (weights, config, tokenizer) and a provider trains from the unpacked copy.
    #[test]
    fn pretrained_text_job_ships_the_encoder_as_its_model_blob() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "model = \"bert-lora\"\ntotal_steps = 4\ncheckpoint_interval = 2\neffective_batch = 2\n[text]\nmax_len = 16\n",
        );
        let (spec, blobs) = JobFile::load(&p).and_then(|f| f.build(&p)).expect("build");
        let t = train_spec(&spec).expect("train spec");
        assert!(matches!(
            &t.model,
            ModelSpec::BertLora { base: gpuchain_trainer::BertBase::Pretrained { name }, .. }
                if *name == hex::encode(spec.model_blob)
        ));
        let model_dir = dir.path().join(MODEL_SUBDIR);
        let names = bundle::unpack_to_dir(&blobs.model, &model_dir).expect("model");
        assert_eq!(names, text_job::PRETRAINED_FILES);
        bundle::unpack_to_dir(&blobs.train, dir.path()).expect("train");
        bundle::unpack_to_dir(&blobs.eval, dir.path()).expect("eval");
        let cpu = gpuchain_trainer::DeviceChoice::Cpu.open().expect("cpu");
        let job = Job::bert_lora_dirs(t, &model_dir, dir.path(), cpu).expect("job");
        let mut tr =
            gpuchain_trainer::Trainer::new(Arc::new(job), 1, Default::default()).expect("trainer");
        let r = tr.step().expect("step");
        assert!(r.loss.is_finite(), "{r:?}");
    }

    #[test]
    fn text_job_files_and_specs_refuse_what_does_not_fit() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "model = \"fashion-cnn\"\ntotal_steps = 4\ncheckpoint_interval = 2\n[text]\nbase = \"tiny\"\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("text on cnn");
        assert!(e.to_string().contains("[text]"), "{e}");
        let p = write(
            dir.path(),
            "model = \"bert-lora\"\ntotal_steps = 4\ncheckpoint_interval = 2\n[text]\nbase = \"tiny\"\nmax_len = 100000\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("huge max_len");
        assert!(e.to_string().contains("max_len"), "{e}");
        let p = write(
            dir.path(),
            "model = \"bert-lora\"\ntotal_steps = 4\ncheckpoint_interval = 2\n[text]\nbase = \"tiny\"\ncategories = [\"computers\", \"nope\"]\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("no such category");
        assert!(e.to_string().contains("nope"), "{e}");
        let p = write(
            dir.path(),
            "model = \"bert-lora\"\ntotal_steps = 4\ncheckpoint_interval = 2\n[text]\nbase = \"gpt-9\"\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("unknown base");
        assert!(e.to_string().contains("model_dir"), "{e}");
        let p = write(
            dir.path(),
            "model = \"bert-lora\"\ntotal_steps = 4\ncheckpoint_interval = 2\n[text]\nbase = \"tiny\"\ntargets = [\"query\", \"ffn\"]\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("unknown target");
        assert!(e.to_string().contains("ffn"), "{e}");

        // A spec a hostile client built by hand: an extra key no node knows is refused.
        let good = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testnet/scenarios/jobs/text-tiny-80.toml");
        let (mut spec, _) = JobFile::load(&good)
            .and_then(|f| f.build(&good))
            .expect("build");
        spec.hyper.extra.insert("lora_dropout".into(), 0.1);
        let e = train_spec(&spec).expect_err("unknown key");
        assert!(e.to_string().contains("lora_dropout"), "{e}");
    }

    /// The fashion CNN needs its state (1.21 MiB) and one example's activations (0.33 MiB):
    /// a provider offering 1 MiB is refused with those figures, 2 MiB fits.
    #[test]
    fn a_provider_too_small_for_the_model_is_told_so_with_the_figures() {
        let h = Hash::repeat_byte(1);
        let mut spec = JobSpec::fashion_cnn_demo(h, h, h);
        spec.effective_batch = 32;
        let e = memory_fit(&spec, 1 << 20).expect_err("1 MiB");
        assert!(
            e.contains("1.00 MiB cannot train") && e.contains("at least 1.54 MiB"),
            "{e}"
        );
        assert_eq!(memory_fit(&spec, 2 << 20), Ok(()));
        assert_eq!(memory_fit(&spec, 16 << 20), Ok(()));
    }

    #[test]
    fn bad_job_files_name_the_problem() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "model = \"fashion-cnn\"\ntotal_steps = 40\ncheckpoint_interval = 10\nbatch = 3\n",
        );
        let e = JobFile::load(&p).expect_err("unknown key");
        assert!(e.to_string().contains("batch"), "{e}");

        let p = write(
            dir.path(),
            "model = \"fashion-cnn\"\ntotal_steps = 40\ncheckpoint_interval = 0\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("zero interval");
        assert!(e.to_string().contains("checkpoint_interval"), "{e}");

        let p = write(
            dir.path(),
            "model = \"fashion-cnn\"\ntotal_steps = 4\ncheckpoint_interval = 2\ndata_dir = \"nowhere\"\n",
        );
        let e = JobFile::load(&p)
            .and_then(|f| f.build(&p))
            .expect_err("missing data");
        assert!(e.to_string().contains("nowhere"), "{e}");

        let e = JobFile::load(&dir.path().join("absent.toml")).expect_err("missing file");
        assert!(e.to_string().contains("--spec"), "{e}");
    }
}
