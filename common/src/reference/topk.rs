//! CPU reference for topk (being written).
