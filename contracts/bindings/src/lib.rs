//! The Rust side of gpuchain's contracts.
//!
//! - [`JobEscrow`] and [`TestUSDC`]: alloy bindings generated from the committed artifacts in
//!   `contracts/artifacts/` (rebuilt from source and compared by `contracts/scripts/check`,
//!   so they cannot drift from the Solidity).
//! - [`Toolchain`]: where `scripts/setup` put the npm-installed `anvil` and `forge`.
//! - [`deploy_test_usdc`] and [`deploy_job_escrow`]: deployment given any alloy provider.
//!
//! The EIP-712 `Bid` and `Vote` types are the protocol crate's; `docs/interfaces.md` fixes
//! their encoding and `contracts/test/vectors/eip712.json` checks it on both sides.

pub mod chain;

use std::path::{Path, PathBuf};

use alloy::network::Network;
use alloy::node_bindings::Anvil;
use alloy::primitives::{Address, U256};
use alloy::providers::Provider;

// The generated call builders mirror the ABI, so createJob and JobCreated take 11–12 arguments.
alloy::sol!(
    #[allow(missing_docs, clippy::too_many_arguments)]
    #[sol(rpc, all_derives)]
    JobEscrow,
    "../artifacts/JobEscrow.json"
);

alloy::sol!(
    #[allow(missing_docs)]
    #[sol(rpc, all_derives)]
    TestUSDC,
    "../artifacts/TestUSDC.json"
);

/// The EIP-712 domain name and version of `JobEscrow` (see `docs/interfaces.md`).
pub const EIP712_NAME: &str = "GpuChain JobEscrow";
/// See [`EIP712_NAME`].
pub const EIP712_VERSION: &str = "1";

/// What can go wrong here.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An npm-installed binary is missing: the setup script has not run.
    #[error("{tool} not found at {}: run scripts/setup to install the contract toolchain", path.display())]
    ToolMissing {
        /// `anvil` or `forge`.
        tool: &'static str,
        /// Where it was expected.
        path: PathBuf,
    },
    /// A deployment transaction failed or reverted.
    #[error("deploying {contract}: {source}")]
    Deploy {
        /// Which contract.
        contract: &'static str,
        /// What alloy reported (boxed: it is large, and every `Result` here carries it).
        #[source]
        source: Box<alloy::contract::Error>,
    },
}

/// The Foundry binaries that `scripts/setup` installs with npm under `contracts/node_modules`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    workspace_root: PathBuf,
}

impl Toolchain {
    /// The toolchain of the workspace rooted at `workspace_root` (the folder holding
    /// `scripts/setup` and `contracts/`).
    pub fn new(workspace_root: impl Into<PathBuf>) -> Self {
        Self {
            workspace_root: workspace_root.into(),
        }
    }

    /// The toolchain of the workspace this crate was built in: right for tests, the local
    /// testnet and anything run from a checkout.
    pub fn from_build_checkout() -> Self {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        // this crate lives at <root>/contracts/bindings
        let root = manifest
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| manifest.to_path_buf(), Path::to_path_buf);
        Self::new(root)
    }

    /// The workspace root this toolchain belongs to.
    pub fn workspace_root(&self) -> &Path {
        &self.workspace_root
    }

    /// The `contracts/` folder (the Foundry project).
    pub fn contracts_dir(&self) -> PathBuf {
        self.workspace_root.join("contracts")
    }

    /// Path of the npm-installed `anvil`, or [`Error::ToolMissing`].
    pub fn anvil(&self) -> Result<PathBuf, Error> {
        self.binary("anvil")
    }

    /// Path of the npm-installed `forge`, or [`Error::ToolMissing`].
    pub fn forge(&self) -> Result<PathBuf, Error> {
        self.binary("forge")
    }

    /// An alloy [`Anvil`] builder for the npm-installed binary; add arguments, then spawn.
    pub fn anvil_builder(&self) -> Result<Anvil, Error> {
        Ok(Anvil::at(self.anvil()?))
    }

    fn binary(&self, tool: &'static str) -> Result<PathBuf, Error> {
        // npm's package for each tool keeps the real executable in bin/ (node_modules/.bin
        // only holds links to it)
        let path = self
            .contracts_dir()
            .join("node_modules/@foundry-rs")
            .join(format!("{tool}-linux-amd64"))
            .join("bin")
            .join(tool);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::ToolMissing { tool, path })
        }
    }
}

/// Deploys [`TestUSDC`] from the provider's default sender.
pub async fn deploy_test_usdc<P, N>(provider: P) -> Result<TestUSDC::TestUSDCInstance<P, N>, Error>
where
    P: Provider<N>,
    N: Network,
{
    TestUSDC::deploy(provider)
        .await
        .map_err(|source| Error::Deploy {
            contract: "TestUSDC",
            source: Box::new(source),
        })
}

/// `JobEscrow`'s constructor numbers after the stake token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowParams {
    /// Stake each live epoch reserves, and what one rejected epoch slashes (and burns).
    pub min_stake: U256,
    /// Seconds between `requestUnbond` and `withdrawStake`.
    pub unbond_delay: u64,
    /// The furthest a job's deadline may be from its creation, in seconds.
    pub max_duration: u64,
    /// The longest grace after the deadline a job may ask for, in seconds.
    pub max_grace: u64,
    /// Seconds after the client ends an epoch during which a quorum's accept of its next
    /// checkpoint still lands and pays its provider.
    pub decision_window: u64,
    /// Verifier stake that puts an account in the pool committees are drawn from.
    pub min_verifier_stake: U256,
}

/// Deploys [`JobEscrow`] from the provider's default sender: providers stake `stake_token`
/// under `params`.
pub async fn deploy_job_escrow<P, N>(
    provider: P,
    stake_token: Address,
    params: EscrowParams,
) -> Result<JobEscrow::JobEscrowInstance<P, N>, Error>
where
    P: Provider<N>,
    N: Network,
{
    let EscrowParams {
        min_stake,
        unbond_delay,
        max_duration,
        max_grace,
        decision_window,
        min_verifier_stake,
    } = params;
    JobEscrow::deploy(
        provider,
        stake_token,
        min_stake,
        unbond_delay,
        max_duration,
        max_grace,
        decision_window,
        min_verifier_stake,
    )
    .await
    .map_err(|source| Error::Deploy {
        contract: "JobEscrow",
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tool_names_the_setup_script() {
        let toolchain = Toolchain::new("/nonexistent-gpuchain-root");
        let err = toolchain.anvil().expect_err("no anvil there");
        let msg = err.to_string();
        assert!(msg.contains("scripts/setup"), "{msg}");
        assert!(msg.contains("anvil-linux-amd64/bin/anvil"), "{msg}");
    }

    #[test]
    fn build_checkout_root_holds_the_contracts() {
        let toolchain = Toolchain::from_build_checkout();
        assert!(toolchain.contracts_dir().join("foundry.toml").is_file());
        assert!(toolchain.workspace_root().join("scripts/setup").is_file());
    }

    #[test]
    fn bindings_carry_bytecode() {
        // the artifacts are the deployable contract, not just an ABI
        assert!(JobEscrow::BYTECODE.len() > 1000);
        assert!(TestUSDC::BYTECODE.len() > 1000);
        assert!(JobEscrow::DEPLOYED_BYTECODE.len() < JobEscrow::BYTECODE.len());
    }
}
