//! Day 21: 1D and 2D convolution, from naive to a filter in constant memory and register-blocked tiles (being written).
