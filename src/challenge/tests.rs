use super::*;

fn curve() -> Curve {
    Curve { free: 5, step: 10, max: 64 }
}

#[test]
fn a_person_pays_the_sale_cost_and_a_busy_address_pays_more_up_to_the_bound() {
    let curve = curve();
    assert_eq!((curve.factor(1), curve.factor(5)), (1, 1), "the first five of a minute");
    assert_eq!((curve.factor(6), curve.factor(15), curve.factor(16)), (2, 2, 3));
    assert_eq!(curve.factor(1_000_000), 64, "bounded");
    // 1,000 places from one address within a minute: over 40,000 people's work (the issue asks 50).
    assert_eq!(curve.total(1000), 44_155);
}

#[test]
fn a_counter_is_drawn_below_twice_the_tries_and_averages_them() {
    let draws: Vec<u32> = (0..4000).map(|_| draw_counter(100)).collect();
    assert!(draws.iter().all(|&c| (1..200).contains(&c)));
    let mean = draws.iter().map(|&c| f64::from(c)).sum::<f64>() / draws.len() as f64;
    assert!((90.0..110.0).contains(&mean), "{mean}");
    assert_eq!(draw_counter(0), 1, "at least one try");
    assert!(draw_counter(u64::MAX) < u32::MAX);
}
