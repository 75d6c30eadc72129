// The profile name alone does not say how a custom profile optimizes, so the build records the
// optimization level Cargo passed to this crate.
fn main() {
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=PYRMQ_OPT_LEVEL={opt}");
    println!("cargo:rerun-if-env-changed=OPT_LEVEL");
}
