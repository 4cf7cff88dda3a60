//! Slurm hostlist expansion (to be written).
