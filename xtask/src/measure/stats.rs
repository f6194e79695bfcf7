//! Figures of paired runs: medians, paired ratios as `median (lowest–highest)`, and numbers with
//! thousands separators.

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

/// Paired ratios as `median (lowest–highest)`.
pub fn median_and_range(mut ratios: Vec<f64>) -> String {
    ratios.sort_by(f64::total_cmp);
    format!("{:.3} ({:.2}–{:.2})", median(ratios.clone()), ratios[0], ratios[ratios.len() - 1])
}

/// 1234567.8 -> "1,234,568".
pub fn group(value: f64) -> String {
    let n = value.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}
