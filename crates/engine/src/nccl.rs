//! `rdmaperf doctor nccl` (being written).
