//! Summaries of timing samples.

/// Mean and sample standard deviation (0 for fewer than two samples).
pub(super) fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// The q-quantile (nearest rank) of `v`; 0 when empty.
pub(super) fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_deviation() {
        assert_eq!(mean_sd(&[2.0, 4.0, 6.0]), (4.0, 2.0));
        assert_eq!(mean_sd(&[3.0]), (3.0, 0.0));
    }

    #[test]
    fn percentile_takes_the_nearest_rank() {
        let mut v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut v, 0.5), 3.0);
        assert_eq!(percentile(&mut v, 0.99), 5.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }
}
