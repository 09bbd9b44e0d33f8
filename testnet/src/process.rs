//! Child processes in their own process group, signalled as a group, always reaped.
//!
//! The workspace forbids `unsafe`, so there is no `libc::kill`: signals other than SIGKILL go
//! through the `kill` program. SIGKILL also goes through `Child::kill`, so teardown works
//! even on a machine without `kill`.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The signals the harness sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
    Stop,
    Cont,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
        }
    }
}

fn kill_program() -> &'static str {
    if Path::new("/bin/kill").is_file() {
        "/bin/kill"
    } else {
        "kill"
    }
}

fn send(target: &str, sig: Signal) -> Result<bool> {
    let status = Command::new(kill_program())
        .args(["-s", sig.name(), "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run `kill -s {} {target}`", sig.name()))?;
    Ok(status.success())
}

/// Sends `sig` to the process group led by `pid`, falling back to the process alone (a
/// group can be gone while its leader is a zombie).
pub fn signal(pid: u32, sig: Signal) -> Result<()> {
    if send(&format!("-{pid}"), sig)? || send(&pid.to_string(), sig)? {
        Ok(())
    } else {
        bail!("kill -s {} {pid} failed: no such process", sig.name())
    }
}

/// True while `pid` names a process that has not exited (a zombie counts as gone). Reads
/// `/proc`, so it is Linux only; elsewhere it reports false.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The command name in parentheses may itself hold spaces or parentheses.
    match stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
    {
        Some(state) => state != "Z" && state != "X",
        None => false,
    }
}

/// A spawned child that is killed and reaped when dropped. The child sits behind a mutex so
/// that polling it (`try_wait` needs `&mut`) works through shared references.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Mutex<Option<Child>>,
    pid: u32,
}

impl Proc {
    /// Spawns `cmd` as the leader of a new process group, so that signals reach anything it
    /// starts and a Ctrl-C meant for the test runner does not reach it.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<Self> {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn()?;
        let pid = child.id();
        Ok(Self {
            child: Mutex::new(Some(child)),
            pid,
        })
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        // A panic while holding this lock cannot leave the Option half-updated.
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The exit status once the child has exited (and reaps it); `None` while it runs or
    /// once the status has been taken.
    pub fn try_exit(&self) -> Option<ExitStatus> {
        let mut slot = self.child();
        let status = slot.as_mut()?.try_wait().ok().flatten()?;
        *slot = None;
        Some(status)
    }

    pub fn is_running(&self) -> bool {
        let _ = self.try_exit();
        self.child().is_some()
    }

    pub fn signal(&self, sig: Signal) -> Result<()> {
        if !self.is_running() {
            bail!("process {} has already exited", self.pid);
        }
        signal(self.pid, sig)
    }

    /// SIGKILL to the whole group, then waits for the leader.
    pub fn kill(&self) -> Option<ExitStatus> {
        let mut child = self.child().take()?;
        let _ = signal(self.pid, Signal::Kill);
        let _ = child.kill();
        child.wait().ok()
    }

    /// SIGTERM (plus SIGCONT, so that a paused process gets to handle it), then SIGKILL if
    /// it has not exited within `grace`.
    pub async fn terminate(&self, grace: Duration) -> Option<ExitStatus> {
        if !self.is_running() {
            return None;
        }
        let _ = signal(self.pid, Signal::Term);
        let _ = signal(self.pid, Signal::Cont);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
