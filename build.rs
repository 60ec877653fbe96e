//! One link option for the binary: its relative relocations packed (`DT_RELR`), so a start
//! reads and applies 5 KB of relocations instead of 109 KB. Every run of the lab pays for its
//! start (`benches-disabled.md`, "Timing a run yourself"). Only for Linux with glibc: the
//! linker writes them (rust-lld, or GNU ld 2.38 and later; an older ld ignores the option with
//! a warning), and the binary then needs glibc 2.36 or later to start.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
