//! What the codec's property tests share.

use engine::proto::wire::MAGIC;

/// A frame header with the given fields (for frames the encoder would
/// never write).
pub(crate) fn header(version: u16, kind: u8, flags: u8, len: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&version.to_be_bytes());
    h.push(kind);
    h.push(flags);
    h.extend_from_slice(&len.to_be_bytes());
    h
}
