//! The concurrency sweep's charts, as SVG drawn by plotters: `<stem>-concurrency.svg`
//! (purchases per second and p99 against the connections) and `<stem>-cpu.svg` (CPU µs per
//! purchase of each party at each number of connections, stacked).

use plotters::prelude::*;

use super::builder::Report;
use super::sweep::PARTIES;

/// The parties' colours, in the order of [`PARTIES`].
const COLOURS: [RGBColor; 4] =
    [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44), RGBColor(150, 150, 150)];

/// One sweep row as the charts read it.
struct Point {
    connections: f64,
    rate: f64,
    p99_ms: f64,
    us: Vec<f64>,
}

/// What a panel of the concurrency chart draws of a point.
type Figure = fn(&Point) -> f64;

fn points(r: &Report) -> Vec<Point> {
    r.sweep
        .iter()
        .filter_map(|row| {
            Some(Point {
                connections: row.extra_f64("connections")?,
                rate: row.rate?,
                p99_ms: row.p99_ms?,
                us: PARTIES.iter().map(|(col, _)| row.extra_f64(&format!("{col}_us")).unwrap_or(0.0)).collect(),
            })
        })
        .collect()
}

/// The two charts by name (`concurrency`, `cpu`), or `None` without sweep rows.
pub fn charts(r: &Report) -> anyhow::Result<Option<[(&'static str, String); 2]>> {
    let points = points(r);
    if points.is_empty() {
        return Ok(None);
    }
    let title = format!("POST /buy in stock, {}", r.machine.get("cpu").map_or("?", String::as_str));
    Ok(Some([("concurrency", concurrency(&points, &title)?), ("cpu", cpu(&points, &title)?)]))
}

fn concurrency(points: &[Point], title: &str) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(title, ("sans-serif", 18))?;
        let (left, right) = root.split_horizontally(480);
        let lowest = points.iter().map(|p| p.connections).fold(f64::INFINITY, f64::min) / 1.5;
        let highest = points.iter().map(|p| p.connections).fold(0.0, f64::max) * 1.5;
        let ticks: Vec<f64> = points.iter().map(|p| p.connections).collect();
        let panels: [(_, &str, Figure); 2] =
            [(&left, "purchases per second", |p| p.rate), (&right, "p99 latency, ms", |p| p.p99_ms)];
        for (area, caption, value) in panels {
            let top = points.iter().map(value).fold(0.0, f64::max) * 1.15;
            let mut chart = ChartBuilder::on(area)
                .caption(caption, ("sans-serif", 15))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d((lowest..highest).log_scale().with_key_points(ticks.clone()), 0.0..top.max(1.0))?;
            chart
                .configure_mesh()
                .x_desc("wrk connections (log scale)")
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .draw()?;
            chart.draw_series(LineSeries::new(
                points.iter().map(|p| (p.connections, value(p))),
                COLOURS[0].stroke_width(2),
            ))?;
            chart.draw_series(points.iter().map(|p| Circle::new((p.connections, value(p)), 4, COLOURS[0].filled())))?;
        }
        root.present()?;
    }
    Ok(svg)
}

fn cpu(points: &[Point], title: &str) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let total = |p: &Point| p.us.iter().sum::<f64>();
        let top = points.iter().map(total).fold(0.0, f64::max) * 1.35; // room for the legend
        let n = points.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{title}: CPU µs per purchase, by party"), ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top.max(1.0))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_desc("wrk connections")
            .y_desc("CPU µs per purchase")
            .x_label_formatter(&|x| {
                let i = x.round();
                match points.get(i as usize) {
                    Some(p) if (x - i).abs() < 0.01 && i >= 0.0 => format!("{:.0}", p.connections),
                    _ => String::new(),
                }
            })
            .draw()?;
        for (k, (party, _)) in PARTIES.iter().enumerate() {
            let colour = COLOURS[k];
            let bars = points.iter().enumerate().map(|(i, p)| {
                let below: f64 = p.us[..k].iter().sum();
                let x = i as f64;
                Rectangle::new([(x - 0.3, below), (x + 0.3, below + p.us[k])], colour.filled())
            });
            chart
                .draw_series(bars)?
                .label(*party)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        }
        chart.configure_series_labels().position(SeriesLabelPosition::UpperRight).border_style(BLACK).draw()?;
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::bench::model::Row;

    fn report(rows: &[(u32, f64, f64, [f64; 4])]) -> Report {
        let sweep = rows
            .iter()
            .map(|(c, rate, p99, us)| {
                let mut row = Row { rate: Some(*rate), p99_ms: Some(*p99), ..Default::default() };
                row.extra("connections", c);
                for ((col, _), us) in PARTIES.iter().zip(us) {
                    row.extra(&format!("{col}_us"), us);
                }
                row
            })
            .collect();
        Report {
            generated_at: String::new(),
            machine: BTreeMap::from([("cpu".into(), "a test CPU".into())]),
            settings: BTreeMap::new(),
            healthz_rate: None,
            rows: vec![],
            algorithms: vec![],
            flat: vec![],
            sweep,
            invariants: vec![],
            logs: BTreeMap::new(),
            notes: vec![],
            problems: vec![],
        }
    }

    /// The texts of an SVG, trimmed.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text").skip(1).filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim())).collect()
    }

    #[test]
    fn the_charts_draw_every_row_and_label_each_connection_count() {
        assert!(charts(&report(&[])).unwrap().is_none(), "no sweep, no charts");
        let rows = [(4, 900.0, 2.0, [30.0, 20.0, 5.0, 10.0]), (64, 2500.0, 40.0, [25.0, 18.0, 4.0, 9.0])];
        let [(concurrency_name, concurrency), (cpu_name, cpu)] = charts(&report(&rows)).unwrap().unwrap();
        assert_eq!((concurrency_name, cpu_name), ("concurrency", "cpu"));
        for svg in [&concurrency, &cpu] {
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
        }
        // Two panels of two points each, their axes labelled with the rows' connections.
        let labels = texts(&concurrency);
        assert_eq!(concurrency.matches("<circle").count(), 4, "{concurrency}");
        for label in ["POST /buy in stock, a test CPU", "purchases per second", "p99 latency, ms"] {
            assert!(labels.contains(&label), "{label} missing from {labels:?}");
        }
        assert_eq!(labels.iter().filter(|t| **t == "4" || **t == "64").count(), 4, "{labels:?}");
        // A stacked bar of four parties per row, one legend key per party.
        let labels = texts(&cpu);
        for label in ["4", "64", "app", "redis", "postgres", "wrk", "CPU µs per purchase"] {
            assert!(labels.contains(&label), "{label} missing from {labels:?}");
        }
        let bars = cpu.matches("<rect").count() - 2; // the background, the legend's box
        assert_eq!(bars, rows.len() * PARTIES.len() + PARTIES.len(), "{cpu}");
    }
}
