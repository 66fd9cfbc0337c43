//! The check of a backward output made of parts: dx, then dweight, then LayerNorm's dbias.

use super::*;

/// One part of an output: `rows x cols` elements, its reference and tolerance.
struct Part<'a> {
    rows: usize,
    values: &'a [f64],
    tolerance: Tolerance,
}

/// The backward's output checked part by part (dx, dweight, dbias), each against its own
/// tolerance, merged into one report: elements and failures add up, errors are the largest
/// of any part, mismatch indices are in the whole output (`[rows, c]` is dweight's column c,
/// `[rows + 1, c]` dbias's). It passes only if every part passes; the tolerance it shows is
/// then the loosest part's (every element is within it), else the first failing part's.
pub fn check_backward<T: Element>(
    got: &[T],
    grads: &Gradients,
    cols: usize,
    [dx_tol, dw_tol, db_tol]: [Tolerance; 3],
) -> CheckReport {
    let rows = grads.dx.values.len() / cols.max(1);
    let mut parts = vec![
        Part {
            rows,
            values: &grads.dx.values,
            tolerance: dx_tol,
        },
        Part {
            rows: 1,
            values: &grads.dweight.values,
            tolerance: dw_tol,
        },
    ];
    if !grads.dbias.values.is_empty() {
        parts.push(Part {
            rows: 1,
            values: &grads.dbias.values,
            tolerance: db_tol,
        });
    }
    let mut merged: Option<CheckReport> = None;
    let (mut offset, mut row_offset) = (0, 0);
    let mut failing_tolerance: Option<(Tolerance, f64)> = None;
    for part in parts {
        let len = part.values.len();
        let mut report = check::compare(
            &got[offset..offset + len],
            part.values,
            &[part.rows, cols],
            part.tolerance,
        );
        // A part that vanishes at this shape (dx of one-column rows), or that has only a few
        // elements (dweight of a narrow row: one column sum of terms of both signs, whose
        // cancellation the per-element bound, scaled by the sum of |terms|, already covers),
        // is judged per element: a relative L2 error over a handful of values is not an
        // average, and relative to rounding noise it means nothing.
        const FEW: usize = 64;
        let rms = (part.values.iter().map(|v| v * v).sum::<f64>() / len.max(1) as f64).sqrt();
        if report.mismatches == 0 && (rms < part.tolerance.atol || len < FEW) {
            report.rel_l2_err = 0.0;
        }
        if !report.passed() && failing_tolerance.is_none() {
            failing_tolerance = Some((part.tolerance, report.rel_l2_err));
        }
        for m in &mut report.first {
            m.index[0] += row_offset;
        }
        merged = Some(match merged {
            None => report,
            Some(mut m) => {
                m.elements += report.elements;
                m.mismatches += report.mismatches;
                m.unwritten += report.unwritten;
                m.nans += report.nans;
                m.max_abs_err = m.max_abs_err.max(report.max_abs_err);
                m.max_rel_err = m.max_rel_err.max(report.max_rel_err);
                m.rel_l2_err = m.rel_l2_err.max(report.rel_l2_err);
                m.tolerance = Tolerance {
                    atol: m.tolerance.atol.max(report.tolerance.atol),
                    rtol: m.tolerance.rtol.max(report.tolerance.rtol),
                    max_rel_l2: m.tolerance.max_rel_l2.max(report.tolerance.max_rel_l2),
                };
                let room = 8usize.saturating_sub(m.first.len());
                m.first.extend(report.first.into_iter().take(room));
                m
            }
        });
        offset += len;
        row_offset += part.rows;
    }
    let mut merged = merged.expect("dx is always a part");
    if let Some((tolerance, rel_l2)) = failing_tolerance {
        merged.tolerance = tolerance;
        merged.rel_l2_err = rel_l2;
        if merged.mismatches == 0 {
            // Only an L2 bound failed: make sure the merged report says so.
            merged.rel_l2_err = merged.rel_l2_err.max(tolerance.max_rel_l2 * (1.0 + 1e-12));
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_parts_are_checked_with_their_own_tolerances() {
        let grads = reference::backward::<f32>(
            Kind::Layer,
            &[1.0, 2.0, 4.0, 3.0, 0.5, 2.5],
            &[1.0, 0.5, 2.0],
            &[0.5, -1.0, 0.25, 1.0, -0.5, 0.75],
            2,
            3,
            1e-5,
        );
        let exact: Vec<f32> = grads.concatenated().iter().map(|&v| v as f32).collect();
        let tight = Tolerance::new(1e-6, 1e-5);
        let loose = Tolerance::new(0.5, 1e-5).with_max_rel_l2(1.0);
        assert!(check_backward(&exact, &grads, 3, [tight; 3]).passed());
        // dweight[1] off by 0.1: fails a tight dweight tolerance, passes a loose one; the
        // mismatch is reported at [rows, 1].
        let mut off = exact.clone();
        off[7] += 0.1;
        let report = check_backward(&off, &grads, 3, [tight, tight, tight]);
        assert!(!report.passed());
        assert_eq!(report.first[0].index, vec![2, 1]);
        assert!(check_backward(&off, &grads, 3, [tight, loose, tight]).passed());
        // The same error in dx fails even when dweight's tolerance is loose.
        let mut off = exact.clone();
        off[1] += 0.1;
        assert!(!check_backward(&off, &grads, 3, [tight, loose, loose]).passed());
        // An unwritten dbias element is found at [rows + 1, c].
        let mut off = exact;
        off[9 + 2] = f32::POISON;
        let report = check_backward(&off, &grads, 3, [tight; 3]);
        assert_eq!(
            (report.unwritten, report.first[0].index.clone()),
            (1, vec![3, 2])
        );
    }
}
