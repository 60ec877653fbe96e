//! One link option for the binary: its relative relocations packed (`DT_RELR`), so a start
//! reads and applies a few hundred bytes of them instead of ~110 KB. Every run of the lab pays
//! for its start, and the default run's peak RSS is mostly the binary's own pages
//! (`benches-disabled.md`, "A lean binary"). Linux with glibc only, where the linker and the
//! loader both know the format (binutils 2.38, glibc 2.36): elsewhere nothing changes.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo::rerun-if-changed=build.rs");
}
