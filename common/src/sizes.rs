//! Sizes from the command line, checked before anything is built from them: a zero where a
//! kernel needs at least one, or a product that overflows `usize` (which release builds would
//! wrap around to a small number that then passes every later check), is a [`UsageError`]
//! (exit 2, one `error:` line) instead of a panic, an abort or a silent wrong size.

use crate::error::UsageError;

/// A clap `value_parser` for sizes that must be at least 1:
/// `#[arg(long, value_parser = common::sizes::positive)]`.
pub fn positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number ({e})")),
    }
}

/// [`positive`] for flags held as `u64`.
pub fn positive_u64(text: &str) -> Result<u64, String> {
    positive(text).map(|n| n as u64)
}

/// A count from 0 to `max`: `--warmup`.
pub fn count_at_most(text: &str, max: u32) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if n > max => Err(format!("must be at most {max}")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number ({e})")),
    }
}

/// A count from 1 to `max`: `--iters`.
pub fn positive_at_most(text: &str, max: u32) -> Result<u32, String> {
    match count_at_most(text, max)? {
        0 => Err("must be at least 1".to_string()),
        n => Ok(n),
    }
}

/// The product of `factors`, or a [`UsageError`] naming `what` when it overflows.
pub fn product(what: &str, factors: &[usize]) -> Result<usize, UsageError> {
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| {
            let shown: Vec<String> = factors.iter().map(|f| f.to_string()).collect();
            UsageError::new(format!(
                "{what}: {} is too large to address",
                shown.join(" x ")
            ))
        })
}

/// The sum of `terms`, or a [`UsageError`] naming `what` when it overflows.
pub fn sum(what: &str, terms: &[usize]) -> Result<usize, UsageError> {
    terms
        .iter()
        .try_fold(0usize, |acc, &t| acc.checked_add(t))
        .ok_or_else(|| UsageError::new(format!("{what}: the sum is too large to address")))
}

/// Refuses a size of 0 for the size named `what`.
pub fn at_least_one(what: &str, value: usize) -> Result<usize, UsageError> {
    if value == 0 {
        return Err(UsageError::new(format!("{what} must be at least 1")));
    }
    Ok(value)
}

/// Refuses a size above `max` (a kernel's limit, or what a 32-bit index can reach).
pub fn at_most(what: &str, value: usize, max: usize) -> Result<usize, UsageError> {
    if value > max {
        return Err(UsageError::new(format!(
            "{what} is {value}, more than the {max} this can take"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_non_numbers_are_refused_by_the_parser() {
        assert_eq!(positive("7"), Ok(7));
        assert!(positive("0").is_err());
        assert!(positive("-1").is_err());
        assert!(positive("1e3").is_err());
    }

    #[test]
    fn overflowing_products_and_sums_are_errors_not_wraps() {
        assert_eq!(product("x", &[3, 5, 7]).unwrap(), 105);
        let err = product("the queries", &[usize::MAX / 2, 3]).unwrap_err();
        assert!(err.to_string().starts_with("the queries: "), "{err}");
        assert_eq!(sum("x", &[1, 2]).unwrap(), 3);
        assert!(sum("x", &[usize::MAX, 1]).is_err());
    }

    #[test]
    fn bounds() {
        assert!(at_least_one("--rows", 0).is_err());
        assert_eq!(at_least_one("--rows", 3).unwrap(), 3);
        assert!(at_most("--k", 5, 4).is_err());
        assert_eq!(at_most("--k", 4, 4).unwrap(), 4);
    }
}
