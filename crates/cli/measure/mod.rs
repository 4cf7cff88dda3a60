//! The measured loops, behind one trait ([`crate::runner::Measure`]): the
//! bandwidth loop generic over the operation ([`bw`]) and the latency
//! loops ([`lat`]).

pub mod bw;
pub mod lat;
