//! Link options for the binary, on Linux with glibc, where every run of the lab pays for its
//! start (`benches-disabled.md`, "What made it lean"):
//!
//! - its relative relocations packed (`DT_RELR`), so a start reads and applies 5 KB of
//!   relocations instead of 109 KB. The linker writes them (rust-lld, or GNU ld 2.38 and later;
//!   an older ld ignores the option with a warning), and the binary then needs glibc 2.36 or
//!   later to start;
//! - in a release build, the code a default run and `predict` execute laid out together, in the
//!   order `tools/hot-code.txt` names it (rust-lld's `--symbol-ordering-file`), so a run maps
//!   that code's few hundred KiB rather than some of every 64 KiB of the whole. A name the file
//!   lists that the binary lacks (other code, another compiler) is passed over, so a stale list
//!   orders less and breaks nothing; `tools/order-hot-code` writes it again;
//! - in a release build, its symbols stripped, unless `ISOLATION_LAB_KEEP_SYMBOLS` is set (as
//!   `tools/order-hot-code` sets it, to name the code a run executes). Stripped here rather than
//!   by the profile's `strip`, so that a build keeping them is the same build under the same
//!   profile, every symbol named as in the build it orders.

use std::env;
use std::process::Command;

const HOT_CODE: &str = "tools/hot-code.txt";

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={HOT_CODE}");
    println!("cargo::rerun-if-env-changed=ISOLATION_LAB_KEEP_SYMBOLS");
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if !(os == "linux" && target_env == "gnu") {
        return;
    }
    println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    if env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    if env::var_os("ISOLATION_LAB_KEEP_SYMBOLS").is_none() {
        println!("cargo::rustc-link-arg-bins=-Wl,--strip-all");
    }
    if links_with_rust_lld() {
        let dir = env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        println!("cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/{HOT_CODE}");
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the binary is linked by rust-lld, which reads a symbol ordering file (GNU ld does
/// not): the default for `x86_64-unknown-linux-gnu` since Rust 1.90, unless a linker is chosen.
fn links_with_rust_lld() -> bool {
    let chosen = env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
        || env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|flags| flags.contains("link"));
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc).arg("-V").output();
    let version = version.map(|out| String::from_utf8_lossy(&out.stdout).into_owned());
    // "rustc 1.95.0 (59807616e 2026-04-14)": the minor version.
    let minor = version.ok().and_then(|v| {
        let number = v.split_whitespace().nth(1)?.to_owned();
        number.split('.').nth(1)?.parse::<u32>().ok()
    });
    env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu")
        && !chosen
        && minor.is_some_and(|minor| minor >= 90)
}
