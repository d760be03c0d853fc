//! Charts of lab results, each as SVG and PNG (plotters): throughput by level and member count
//! (the matrix), a sweep as lines, and per-member load as bars over time.
//!
//! Text is laid out with a TrueType font read from the machine (DejaVu Sans or Liberation
//! Sans, the first found; `RAIDKIT_FONT` names another), so no font library is linked.

use super::run::Sample;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers the font once; the error says what to install.
fn font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("RAIDKIT_FONT").ok();
        let candidates: Vec<String> = env
            .into_iter()
            .chain(FONT_PATHS.iter().map(|s| s.to_string()))
            .collect();
        for p in &candidates {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err(format!(
            "no TrueType font to draw charts with (looked for {}); install fonts-dejavu-core or set RAIDKIT_FONT to a .ttf file",
            candidates.join(", ")
        ))
    })
    .clone()
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// Draws one chart twice, as `STEM.svg` and `STEM.png`; returns both paths.
fn both(
    stem: &Path,
    size: (u32, u32),
    svg: impl FnOnce(DrawingArea<SVGBackend, Shift>) -> Result<(), String>,
    png: impl FnOnce(DrawingArea<BitMapBackend, Shift>) -> Result<(), String>,
) -> Result<Vec<PathBuf>, String> {
    font()?;
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|x| format!("{}: {x}", dir.display()))?;
    }
    let s = stem.with_extension("svg");
    let p = stem.with_extension("png");
    {
        let root = SVGBackend::new(&s, size).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        svg(root.clone())?;
        root.present().map_err(e)?;
    }
    {
        let root = BitMapBackend::new(&p, size).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        png(root.clone())?;
        root.present().map_err(e)?;
    }
    Ok(vec![s, p])
}

/// One named line of (x, y) points.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// Axes of a line chart.
#[derive(Clone, Debug)]
pub struct Axes {
    pub title: String,
    pub x: String,
    pub y: String,
    /// Base-2 logarithmic x axis (request sizes, queue depths).
    pub log_x: bool,
}

/// A tick label without needless decimals.
fn short(v: f64) -> String {
    if v.fract().abs() < 1e-9 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn lines_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    axes: &Axes,
    series: &[Series],
) -> Result<(), String> {
    draw_on(area, axes, series, 0)
}

/// Draws `series` as points, those from index `joined_from` on joined by lines.
fn draw_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    axes: &Axes,
    series: &[Series],
    joined_from: usize,
) -> Result<(), String> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return Err(format!("{}: nothing to draw", axes.title));
    }
    if x0 == x1 {
        x0 -= 1.0;
        x1 += 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.12 } else { 1.0 };
    // Whole-number x values (member counts, queue depths): one label per value.
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let x_labels = if xs.iter().all(|x| x.fract() == 0.0) && xs.len() <= 16 && !axes.log_x {
        (x1 - x0) as usize + 1
    } else {
        10
    };
    let mut b = ChartBuilder::on(area);
    b.caption(&axes.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(axes.x.as_str())
                .y_desc(axes.y.as_str())
                .x_labels(x_labels)
                .x_label_formatter(&|x: &f64| short(*x))
                .y_label_formatter(&|y: &f64| short(*y))
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(e)?;
            for (i, s) in series.iter().enumerate() {
                let c = color(i);
                let join = i >= joined_from;
                // Unjoined points: the line is drawn with no width, for the legend only.
                let width = if join { 2 } else { 0 };
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied().filter(|_| join),
                        c.stroke_width(width),
                    ))
                    .map_err(e)?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                    });
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                    .map_err(e)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(e)?;
        }};
    }
    if axes.log_x {
        draw!(b
            .build_cartesian_2d((x0..x1).log_scale().base(2.0), 0.0..y1)
            .map_err(e)?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(e)?);
    }
    Ok(())
}

/// A line chart (a sweep: one line per queue depth over request size, say).
pub fn lines(stem: &Path, axes: &Axes, series: &[Series]) -> Result<Vec<PathBuf>, String> {
    both(
        stem,
        (960, 600),
        |r| lines_on(&r, axes, series),
        |r| lines_on(&r, axes, series),
    )
}

/// A scatter chart: each of `points` as points, not joined (predicted against measured,
/// say), and `lines` (references such as y = x) joined.
pub fn scatter(
    stem: &Path,
    axes: &Axes,
    points: &[Series],
    lines: &[Series],
) -> Result<Vec<PathBuf>, String> {
    let all: Vec<Series> = points.iter().chain(lines).cloned().collect();
    let n = points.len();
    both(
        stem,
        (900, 760),
        |r| draw_on(&r, axes, &all, n),
        |r| draw_on(&r, axes, &all, n),
    )
}

/// Two line charts side by side (the matrix: write and read MB/s by member count, one line
/// per level).
pub fn pair(
    stem: &Path,
    title: &str,
    left: (&Axes, &[Series]),
    right: (&Axes, &[Series]),
) -> Result<Vec<PathBuf>, String> {
    fn on<DB: DrawingBackend>(
        root: DrawingArea<DB, Shift>,
        title: &str,
        left: (&Axes, &[Series]),
        right: (&Axes, &[Series]),
    ) -> Result<(), String> {
        let root = root.titled(title, ("sans-serif", 26)).map_err(e)?;
        let halves = root.split_evenly((1, 2));
        lines_on(&halves[0], left.0, left.1)?;
        lines_on(&halves[1], right.0, right.1)
    }
    both(
        stem,
        (1400, 620),
        |r| on(r, title, left, right),
        |r| on(r, title, left, right),
    )
}

/// Each member's MB/s (read and write) as bars, one group per sampling interval.
pub fn member_load(stem: &Path, title: &str, samples: &[Sample]) -> Result<Vec<PathBuf>, String> {
    fn on<DB: DrawingBackend>(
        root: DrawingArea<DB, Shift>,
        title: &str,
        samples: &[Sample],
    ) -> Result<(), String> {
        let mut names: Vec<String> = Vec::new();
        for s in samples {
            for m in &s.members {
                if !names.contains(&m.name) {
                    names.push(m.name.clone());
                }
            }
        }
        if names.is_empty() {
            return Err(format!("{title}: no member load to draw"));
        }
        let t1 = samples.last().map_or(1.0, |s| s.t).max(1e-3);
        let ymax = samples
            .iter()
            .flat_map(|s| s.members.iter().map(|m| m.read_mb_s + m.write_mb_s))
            .fold(0.0f64, f64::max)
            .max(1e-3)
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..t1, 0.0..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("member MB/s (read + write)")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        let mut prev = 0.0;
        let mut bars: Vec<Vec<Rectangle<(f64, f64)>>> = names.iter().map(|_| Vec::new()).collect();
        for s in samples {
            let w = (s.t - prev) / names.len() as f64;
            for m in &s.members {
                let i = names.iter().position(|n| *n == m.name).unwrap_or(0);
                let x = prev + w * i as f64;
                bars[i].push(Rectangle::new(
                    [
                        (x + w * 0.08, 0.0),
                        (x + w * 0.92, m.read_mb_s + m.write_mb_s),
                    ],
                    color(i).filled(),
                ));
            }
            prev = s.t;
        }
        for (i, (name, b)) in names.iter().zip(bars).enumerate() {
            let c = color(i);
            chart
                .draw_series(b)
                .map_err(e)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(e)?;
        Ok(())
    }
    both(
        stem,
        (1100, 560),
        |r| on(r, title, samples),
        |r| on(r, title, samples),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_written_as_svg_and_png() {
        if let Err(why) = font() {
            panic!("{why}");
        }
        let dir = std::env::temp_dir().join(format!("raidkit-chart-{}", std::process::id()));
        let axes = Axes {
            title: "sweep".into(),
            x: "KiB".into(),
            y: "MB/s".into(),
            log_x: true,
        };
        let s = vec![Series {
            name: "QD1".into(),
            points: vec![(4.0, 10.0), (64.0, 100.0), (1024.0, 400.0)],
        }];
        let files = lines(&dir.join("sweep"), &axes, &s).unwrap();
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len > 1000, "{}: {len} bytes", f.display());
        }
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("QD1"));
        let png = std::fs::read(&files[1]).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert!(lines(&dir.join("empty"), &axes, &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
