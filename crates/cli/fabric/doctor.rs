//! stub
/// stub
#[derive(Debug, Clone, clap::Args)]
pub struct NcclArgs {}
/// stub
pub fn run(_: &NcclArgs) -> anyhow::Result<u8> { Ok(0) }
