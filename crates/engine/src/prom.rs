//! Prometheus text exposition (being written).
