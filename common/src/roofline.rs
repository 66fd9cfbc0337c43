//! Roofline plots (being written).
