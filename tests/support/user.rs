//! An unprivileged user for tests of what other people can do to a table or a mount
//! (docs/SECURITY.md "Security"): created once per test binary with `useradd` (the tests run as
//! root), and used by running commands under its uid and gid with `setpriv` (util-linux), with no
//! supplementary groups and no capabilities. A missing tool is a test failure with a clear message.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The test user's login name.
pub const NAME: &str = "tdtest";

/// An unprivileged user that exists on this machine.
#[derive(Debug, Clone)]
pub struct User {
    /// Login name.
    pub name: String,
    /// User id (never 0).
    pub uid: u32,
    /// Primary group id (never 0).
    pub gid: u32,
}

fn id_of(flag: &str) -> Option<u32> {
    let out = Command::new("id").arg(flag).arg(NAME).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// The test user, created on first use (`useradd --system`, no home, no login shell). Fails
/// the test unless it runs as root with `useradd` and `setpriv` available.
pub fn test_user() -> User {
    static USER: OnceLock<User> = OnceLock::new();
    USER.get_or_init(|| {
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "the security tests create an unprivileged user and mount with allow_other: run them as root"
        );
        for tool in ["useradd", "setpriv", "id"] {
            assert!(
                Command::new("sh")
                    .arg("-c")
                    .arg(format!("command -v {tool}"))
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
                "the security tests need `{tool}` (apt-get install passwd util-linux coreutils)"
            );
        }
        if id_of("-u").is_none() {
            let out = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    "--user-group",
                    NAME,
                ])
                .output()
                .expect("run useradd");
            // 9: the name exists (another test binary created it meanwhile).
            assert!(
                out.status.success() || out.status.code() == Some(9),
                "useradd {NAME} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let uid = id_of("-u").expect("uid of the test user");
        let gid = id_of("-g").expect("gid of the test user");
        assert!(uid != 0 && gid != 0, "the test user {NAME} must not be root");
        User {
            name: NAME.to_string(),
            uid,
            gid,
        }
    })
    .clone()
}

impl User {
    /// A command that runs `program` as this user: `setpriv --reuid --regid --clear-groups
    /// --inh-caps=-all --bounding-set=-all -- program`.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .arg("--inh-caps=-all")
            .arg("--bounding-set=-all")
            .arg("--")
            .arg(program)
            .stdin(Stdio::null());
        c
    }

    /// Run `program args` as this user; its output (never fails by itself).
    pub fn run<S: AsRef<OsStr>>(&self, program: &str, args: &[S]) -> Output {
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program} as {}: {e}", self.name))
    }

    /// `sh -c script` as this user, with `envs` set.
    pub fn sh(&self, script: &str, envs: &[(&str, &OsStr)]) -> Output {
        let mut c = self.command("sh");
        c.arg("-c").arg(script);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap_or_else(|e| panic!("sh as {}: {e}", self.name))
    }
}

/// Let others traverse `dir` (mode 0755): a test's temporary folder is 0700, so the test user
/// could not reach a mount point inside it otherwise.
pub fn open_to_others(dir: &Path) {
    let mut p = std::fs::metadata(dir)
        .unwrap_or_else(|e| panic!("stat {}: {e}", dir.display()))
        .permissions();
    p.set_mode(0o755);
    std::fs::set_permissions(dir, p).unwrap_or_else(|e| panic!("chmod {}: {e}", dir.display()));
}
