//! Fashion-MNIST from the IDX files of Debian's `dataset-fashion-mnist` package.

use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use super::{Batch, Dataset, Input};
use crate::error::{Result, TrainerError};

/// Where Debian's `dataset-fashion-mnist` installs the files.
pub const DEBIAN_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// `GPUCHAIN_FASHION_MNIST_DIR`, else the Debian package's directory.
pub fn fashion_dir() -> PathBuf {
    std::env::var_os("GPUCHAIN_FASHION_MNIST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEBIAN_DIR))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

/// The training split's files (images, labels), as [`FashionMnist::load`] reads them: a job's
/// training bundle holds exactly these.
pub const FASHION_TRAIN_FILES: [&str; 2] =
    ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"];
/// The test split's files (images, labels): the eval bundle.
pub const FASHION_EVAL_FILES: [&str; 2] =
    ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"];

impl Split {
    /// This split's (images, labels) file names.
    pub fn files(self) -> [&'static str; 2] {
        match self {
            Split::Train => FASHION_TRAIN_FILES,
            Split::Test => FASHION_EVAL_FILES,
        }
    }
}

const SIDE: usize = 28;
const PIXELS: usize = SIDE * SIDE;
// The training set's pixel mean and standard deviation (on a 0..1 scale).
const MEAN: f32 = 0.2860;
const STD: f32 = 0.3530;

/// Images as bytes (converted per batch, which keeps 60k images at 47 MB) and labels 0..9.
pub struct FashionMnist {
    images: Vec<u8>,
    labels: Vec<u8>,
}

impl FashionMnist {
    /// Loads a split; `limit` keeps only the first examples (the eval set is the first 2,000
    /// test images).
    pub fn load(dir: &Path, split: Split, limit: Option<usize>) -> Result<Self> {
        if !dir.is_dir() {
            return Err(TrainerError::Missing {
                what: "Fashion-MNIST directory",
                path: dir.to_path_buf(),
                hint: "run scripts/setup (installs Debian's dataset-fashion-mnist) or set \
                       GPUCHAIN_FASHION_MNIST_DIR"
                    .into(),
            });
        }
        let [images_file, labels_file] = split.files();
        let img_path = dir.join(images_file);
        let lbl_path = dir.join(labels_file);
        let images = read_file(&img_path)?;
        let labels = read_file(&lbl_path)?;
        Self::from_idx_gz(&images, &labels, limit).map_err(|e| match e {
            TrainerError::BadData { path, line, reason } if path.as_os_str() == "images" => {
                TrainerError::BadData {
                    path: img_path.clone(),
                    line,
                    reason,
                }
            }
            TrainerError::BadData { path, line, reason } if path.as_os_str() == "labels" => {
                TrainerError::BadData {
                    path: lbl_path.clone(),
                    line,
                    reason,
                }
            }
            other => other,
        })
    }

    /// Decodes a split from the bytes of its two gzip-compressed IDX files (images, labels),
    /// as a provider reads them from a fetched dataset bundle. Refuses anything but N×28×28
    /// images with as many labels in 0..9, and never inflates more than
    /// [`MAX_IDX_BYTES`] per file. Errors name the file as `images` or `labels`.
    pub fn from_idx_gz(images: &[u8], labels: &[u8], limit: Option<usize>) -> Result<Self> {
        let images = gunzip(Path::new("images"), images)?;
        let labels = gunzip(Path::new("labels"), labels)?;
        Self::from_idx(images, labels, limit)
    }

    /// [`FashionMnist::from_idx_gz`] after decompression: the two IDX files' raw bytes.
    pub fn from_idx(images: Vec<u8>, labels: Vec<u8>, limit: Option<usize>) -> Result<Self> {
        let img_path = Path::new("images");
        let lbl_path = Path::new("labels");
        let (img_dims, mut images) = decode_idx(img_path, images, 0x0803)?;
        let (lbl_dims, mut labels) = decode_idx(lbl_path, labels, 0x0801)?;
        if img_dims.len() != 3 || img_dims[1] != SIDE || img_dims[2] != SIDE {
            return Err(bad(
                img_path,
                format!("expected N×28×28 images, found {img_dims:?}"),
            ));
        }
        if lbl_dims[0] != img_dims[0] {
            return Err(bad(
                lbl_path,
                format!("{} labels for {} images", lbl_dims[0], img_dims[0]),
            ));
        }
        if let Some(pos) = labels.iter().position(|&l| l > 9) {
            return Err(bad(
                lbl_path,
                format!("label {} at index {pos} is not 0..9", labels[pos]),
            ));
        }
        if let Some(n) = limit {
            let n = n.min(labels.len());
            labels.truncate(n);
            images.truncate(n * PIXELS);
        }
        Ok(Self { images, labels })
    }

    pub fn label(&self, i: usize) -> u8 {
        self.labels[i]
    }
}

fn bad(path: &Path, reason: String) -> TrainerError {
    TrainerError::BadData {
        path: path.to_path_buf(),
        line: 0,
        reason,
    }
}

/// The most bytes one IDX file may inflate to: the training images take 47 MB, so this leaves
/// room while refusing a gzip bomb before it exhausts memory.
pub const MAX_IDX_BYTES: u64 = 256 << 20;

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TrainerError::Missing {
                what: "Fashion-MNIST file",
                path: path.to_path_buf(),
                hint: "run scripts/setup (installs Debian's dataset-fashion-mnist)".into(),
            }
        } else {
            TrainerError::io(path, e)
        }
    })
}

/// Inflates a gzip stream, refusing one that inflates past [`MAX_IDX_BYTES`].
fn gunzip(path: &Path, gz: &[u8]) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .take(MAX_IDX_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| bad(path, format!("not a gzip stream: {e}")))?;
    if raw.len() as u64 > MAX_IDX_BYTES {
        return Err(bad(
            path,
            format!("inflates to more than {MAX_IDX_BYTES} bytes"),
        ));
    }
    Ok(raw)
}

/// Parses an IDX file of unsigned bytes: magic, big-endian dims, data.
fn decode_idx(path: &Path, mut raw: Vec<u8>, magic: u32) -> Result<(Vec<usize>, Vec<u8>)> {
    let word = |at: usize| -> Result<u32> {
        raw.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| bad(path, "file ends inside the IDX header".into()))
    };
    let found = word(0)?;
    if found != magic {
        return Err(bad(
            path,
            format!("IDX magic {found:#010x}, expected {magic:#010x}"),
        ));
    }
    let rank = (magic & 0xff) as usize;
    let dims = (0..rank)
        .map(|k| word(4 + 4 * k).map(|d| d as usize))
        .collect::<Result<Vec<_>>>()?;
    let start = 4 + 4 * rank;
    // Dims come from the file: their product can overflow, and must match what it holds.
    let len = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if len != Some(raw.len() - start) {
        return Err(bad(
            path,
            format!(
                "header promises dims {dims:?} of data, file holds {} bytes",
                raw.len() - start
            ),
        ));
    }
    raw.drain(..start);
    Ok((dims, raw))
}

impl Dataset for FashionMnist {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn num_classes(&self) -> usize {
        10
    }

    fn batch(&self, indices: &[usize], device: &Device) -> Result<Batch> {
        super::check_indices(indices, self.len())?;
        let mut pix = Vec::with_capacity(indices.len() * PIXELS);
        let mut lab = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = &self.images[i * PIXELS..(i + 1) * PIXELS];
            pix.extend(img.iter().map(|&b| (f32::from(b) / 255.0 - MEAN) / STD));
            lab.push(u32::from(self.labels[i]));
        }
        let b = indices.len();
        Ok(Batch {
            input: Input::Images(Tensor::from_vec(pix, (b, 1, SIDE, SIDE), device)?),
            labels: Tensor::from_vec(lab, b, device)?,
        })
    }
}
