//! Port metrics against node_exporter (being written).
