//! Day 22: per-row top-k values and indices, a warp bitonic sort for small k and a radix select for large k (being written).
