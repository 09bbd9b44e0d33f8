use std::future::IntoFuture;

use alloy::primitives::{Address, Bytes};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use alloy::transports::RpcError;
use alloy::transports::{TransportError, TransportErrorKind};

use super::error::ChainError;
use super::revert::decode_revert;

/// Transport failures are retried under the project's one policy.
pub use gpuchain_protocol::retry::RetryPolicy;

/// A provider plus what is needed to report its failures well.
#[derive(Debug, Clone)]
pub(crate) struct Rpc {
    pub provider: RootProvider,
    pub url: String,
    pub retry: RetryPolicy,
}

/// Failures worth another try: the transport (connection refused or reset, timeouts, 429,
/// 503) and the rate-limit answers providers send as JSON-RPC errors.
pub(crate) fn is_transient(err: &TransportError) -> bool {
    match err {
        RpcError::Transport(kind) => !matches!(
            kind,
            TransportErrorKind::NonRetryable(_) | TransportErrorKind::PubsubUnavailable
        ),
        RpcError::ErrorResp(payload) => payload.is_retry_err(),
        _ => false,
    }
}

impl Rpc {
    pub fn new(url: &str, retry: RetryPolicy) -> Result<Self, ChainError> {
        let parsed = url.parse().map_err(|e| ChainError::Unexpected {
            url: url.to_string(),
            detail: format!("not a valid HTTP URL: {e}"),
        })?;
        Ok(Self {
            provider: RootProvider::new_http(parsed),
            url: url.to_string(),
            retry,
        })
    }

    /// Runs `op` until it succeeds, fails for good, or the retry budget is spent.
    pub async fn raw<T, F, Fut>(&self, mut op: F) -> Result<T, TransportError>
    where
        F: FnMut() -> Fut,
        Fut: IntoFuture<Output = Result<T, TransportError>>,
    {
        let mut tries = 1;
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let wait = is_transient(&e)
                        .then(|| self.retry.wait_after(tries))
                        .flatten();
                    let Some(wait) = wait else { return Err(e) };
                    tracing::debug!(url = %self.url, error = %e, tries, "transient RPC failure, retrying");
                    tokio::time::sleep(wait).await;
                    tries += 1;
                }
            }
        }
    }

    /// [`Self::raw`] with the failure turned into a [`ChainError`].
    pub async fn call<T, F, Fut>(&self, what: &'static str, op: F) -> Result<T, ChainError>
    where
        F: FnMut() -> Fut,
        Fut: IntoFuture<Output = Result<T, TransportError>>,
    {
        self.raw(op).await.map_err(|e| self.error(what, e))
    }

    pub fn error(&self, what: &'static str, source: TransportError) -> ChainError {
        match source {
            RpcError::Transport(_) => ChainError::Unreachable {
                url: self.url.clone(),
                source,
            },
            RpcError::ErrorResp(ref payload) => match payload.as_revert_data() {
                Some(data) => ChainError::Reverted {
                    call: what,
                    reason: decode_revert(&data),
                    tx: None,
                },
                None => ChainError::Rpc {
                    what,
                    url: self.url.clone(),
                    source,
                },
            },
            _ => ChainError::Rpc {
                what,
                url: self.url.clone(),
                source,
            },
        }
    }

    /// A read-only contract call against the latest block, decoded.
    pub async fn view<C: SolCall>(
        &self,
        what: &'static str,
        to: Address,
        call: C,
    ) -> Result<C::Return, ChainError> {
        let req = TransactionRequest::default()
            .to(to)
            .input(Bytes::from(call.abi_encode()).into());
        let out = self
            .call(what, || {
                self.provider
                    .call(req.clone())
                    .block(alloy::eips::BlockId::latest())
            })
            .await?;
        C::abi_decode_returns(&out).map_err(|e| ChainError::Unexpected {
            url: self.url.clone(),
            detail: format!("{what} returned undecodable data: {e}"),
        })
    }

    /// Number, hash and timestamp of block `number`; `None` if the chain has no such block.
    pub async fn header(
        &self,
        number: u64,
    ) -> Result<Option<(u64, alloy::primitives::B256, u64)>, ChainError> {
        let block = self
            .call("eth_getBlockByNumber", || async move {
                self.provider
                    .get_block_by_number(alloy::eips::BlockNumberOrTag::Number(number))
                    .await
            })
            .await?;
        Ok(block.map(|b| (b.header.number, b.header.hash, b.header.timestamp)))
    }
}
