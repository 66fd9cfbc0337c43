//! CPU reference for conv (being written).
