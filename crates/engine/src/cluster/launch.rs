//! Launcher detection (to be written).
