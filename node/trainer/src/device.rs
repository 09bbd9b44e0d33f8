//! Device choice: `auto`, `cpu` or `cuda:N`. CPU builds never need CUDA; `auto` picks
//! CUDA device 0 only in a `--features cuda` build that finds one.

use std::str::FromStr;

use candle_core::Device;

use crate::error::{Result, TrainerError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceChoice {
    type Err = TrainerError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| TrainerError::Device(format!("{s:?} is not auto, cpu or cuda:N"))),
        }
    }
}

impl DeviceChoice {
    pub fn open(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Auto => {
                if candle_core::utils::cuda_is_available() {
                    Device::new_cuda(0).map_err(|e| TrainerError::Device(format!("cuda:0: {e}")))
                } else {
                    Ok(Device::Cpu)
                }
            }
            Self::Cuda(n) => {
                if !candle_core::utils::cuda_is_available() {
                    return Err(TrainerError::Device(format!(
                        "cuda:{n} requested but this build has no CUDA support: rebuild with --features cuda"
                    )));
                }
                Device::new_cuda(n).map_err(|e| TrainerError::Device(format!("cuda:{n}: {e}")))
            }
        }
    }
}
