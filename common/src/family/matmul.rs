//! What the matmul days share: the problem (`C = A B`, row-major f32), their flags, the runner
//! that checks and times cuBLAS and a day's versions on each problem, sweeps them over sizes
//! or draws their roofline, and the GPU test every matmul day runs.
//!
//! A day implements [`MatmulDay`] (its versions, how each launches on a shape and what it
//! reads from global memory) and its `main` is `common::matmul::main::<DayNN>()`.
//!
//! cuBLAS SGEMM runs first on every problem as the `cublas` row: it is checked like the
//! others, and every row's "% cublas" is measured against it in the same process.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use cudarc::driver::CudaSlice;
use indicatif::ProgressBar;

use crate::cli::{CommonArgs, bytes_for, check_host_fits, family_main, finish_reports};
use crate::family::runner::{day_problem, open_gpu_for, progress_bar};
use crate::gpu::Gpu;
use crate::gpu::cublas::Cublas;
use crate::gpu::kernel::{Kernel, LaunchShape};
use crate::measure::plot::{HLine, LinePlot};
use crate::measure::report::DayReport;
use crate::measure::roofline::{Roofline, RooflinePoint};
use crate::measure::{inputs, roofline, sweep};
use crate::reference::matmul as reference;
use crate::session::{Expected, Problem, Refused, Session, Version, launch_and_read};
use crate::{sizes, testing};

/// The ceiling row's name.
pub const CEILING: &str = "cublas";

/// One problem: row-major `C (m x n) = A (m x k) B (k x n)` in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Shape {
    pub const fn new(m: usize, n: usize, k: usize) -> Self {
        Self { m, n, k }
    }

    pub const fn square(size: usize) -> Self {
        Self::new(size, size, size)
    }

    pub fn describe(&self) -> String {
        format!("{} x {} x {} (m x n x k), f32", self.m, self.n, self.k)
    }

    /// The key peers and reports share: `sgemm/f32/4096x4096x4096`.
    pub fn key(&self) -> String {
        format!("sgemm/f32/{}x{}x{}", self.m, self.n, self.k)
    }

    /// Multiply-adds: m n k.
    pub fn macs(&self) -> u64 {
        (self.m * self.n * self.k) as u64
    }

    /// 2 m n k: a multiply and an add per term.
    pub fn flops(&self) -> u64 {
        2 * self.macs()
    }

    /// Least traffic: A and B read once, C written once.
    pub fn min_bytes(&self) -> u64 {
        4 * (self.m * self.k + self.k * self.n + self.m * self.n) as u64
    }

    /// Bytes a kernel asks of global memory when each block computes a `bm x bn` tile of C
    /// and reads the whole `bm x k` strip of A and `k x bn` strip of B for it (partial tiles
    /// at the edges count as whole): `A` is read `ceil(n / bn)` times, `B` `ceil(m / bm)`
    /// times, C written once. A naive kernel is the case `bm = bn = 1` per thread.
    pub fn tiled_bytes(&self, bm: usize, bn: usize) -> u64 {
        let (m, n, k) = (self.m as u64, self.n as u64, self.k as u64);
        let a_reads = m * k * n.div_ceil(bn as u64);
        let b_reads = k * n * m.div_ceil(bm as u64);
        4 * (a_reads + b_reads + m * n)
    }
}

/// The sweep: square problems from 256 to 8192.
pub const SWEEP_SIZES: [usize; 8] = [256, 512, 1024, 2048, 3072, 4096, 6144, 8192];

/// The flags of the matmul days, beside the common ones.
#[derive(clap::Args, Debug, Clone)]
pub struct MatmulArgs {
    #[command(flatten)]
    pub sizes: crate::cli::GemmSizeArgs,
    /// Run cuBLAS and every version on square sizes 256 to 8192 and plot TFLOP/s.
    #[arg(long, conflicts_with_all = ["size", "m", "n", "k"])]
    pub sweep: bool,
    /// Where --sweep writes its SVG plot.
    #[arg(long, value_name = "FILE", default_value = "sweep.svg")]
    pub plot: PathBuf,
    /// Also draw the roofline of the first problem's versions (SVG) into FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "sweep")]
    pub roofline: Option<PathBuf>,
}

/// Enqueues one `C = A B`: (a, b, c).
pub type Launch<'a> =
    Box<dyn FnMut(&CudaSlice<f32>, &CudaSlice<f32>, &mut CudaSlice<f32>) -> Result<()> + 'a>;

/// How one version runs on one shape.
pub struct Plan<'a> {
    /// The kernel whose attributes the table shows.
    pub kernel: &'a Kernel,
    pub shape: LaunchShape,
    /// What one run asks of global memory (see [`Shape::tiled_bytes`]).
    pub global_bytes: u64,
    pub launch: Launch<'a>,
}

/// A matmul day: its versions and how each launches.
pub trait MatmulDay: Sized {
    /// Package name, `day09`.
    const DAY: &'static str;
    const TITLE: &'static str;
    /// Version names (`--kernel`), in table order; cuBLAS is added before them.
    const VERSIONS: &'static [&'static str];
    /// What `cargo run -p dayNN` runs without a size.
    const DEFAULT_PROBLEMS: &'static [Shape];

    fn load(gpu: &Gpu) -> Result<Self>;

    /// How `version` runs on `shape`, or an error: [`Refused`] for a shape it does not take,
    /// anything else for a real failure.
    fn plan<'a>(&'a self, gpu: &'a Gpu, version: &str, shape: Shape) -> Result<Plan<'a>>;
}

/// The whole `main` of a matmul day.
pub fn main<D: MatmulDay>() -> ExitCode {
    family_main(D::DAY, D::TITLE, D::VERSIONS, run::<D>)
}

fn run<D: MatmulDay>(family: &MatmulArgs, common: &CommonArgs) -> Result<()> {
    let versions = common.select_versions(D::VERSIONS)?;
    let shapes = problems::<D>(family)?;
    // Every size is checked here, before the GPU is opened: the elements of A, B and C, and
    // the 2 m n k FLOPs and tiled traffic the table reports.
    let mut device_bytes = Vec::with_capacity(shapes.len());
    for shape in &shapes {
        let elements = element_count(shape)?;
        sizes::product("2 m n k", &[2, shape.m, shape.n, shape.k])?;
        // A, B and C as f32, plus C's f64 reference, on the host.
        check_host_fits(&shape.describe(), bytes_for("the matrices", elements, 12)?)?;
        let device = bytes_for("the matrices", elements, 4)?;
        device_bytes.push((shape.describe(), device));
    }
    let gpu = open_gpu_for(common, &device_bytes)?;
    let cublas = Cublas::open(&gpu)?;
    let day = D::load(&gpu)?;
    let quiet = family.sweep;
    let progress = progress_bar(quiet, shapes.len() * (versions.len() + 1));
    let run = Run {
        gpu: &gpu,
        cublas: &cublas,
        common,
        day: &day,
        versions: &versions,
        quiet,
        progress: &progress,
    };
    let reports = shapes
        .iter()
        .map(|shape| run.problem(*shape))
        .collect::<Result<Vec<_>>>()?;
    progress.finish_and_clear();
    if family.sweep {
        run.plot_sweep(&family.plot, &shapes, &reports)?;
    }
    if let (Some(path), Some(first)) = (&family.roofline, reports.first()) {
        plot_roofline::<D>(path, &gpu, first)?;
    }
    finish_reports(common, &reports)
}

/// Elements of A, B and C together, refusing sizes whose count overflows.
fn element_count(shape: &Shape) -> Result<u64> {
    let Shape { m, n, k } = *shape;
    let total = sizes::sum(
        "m x k + k x n + m x n",
        &[
            sizes::product("m x k", &[m, k])?,
            sizes::product("k x n", &[k, n])?,
            sizes::product("m x n", &[m, n])?,
        ],
    )?;
    Ok(total as u64)
}

/// The shapes to run: the sweep, the one given, or the day's defaults.
fn problems<D: MatmulDay>(args: &MatmulArgs) -> Result<Vec<Shape>> {
    let size = |flag: &str, v: u64| -> Result<usize> {
        if v > i32::MAX as u64 {
            return Err(crate::UsageError::new(format!(
                "{flag} {v} is too large: dimensions must be below 2^31 (cuBLAS takes 32-bit \
                 sizes)"
            ))
            .into());
        }
        Ok(v as usize)
    };
    if args.sweep {
        return Ok(SWEEP_SIZES.iter().map(|&s| Shape::square(s)).collect());
    }
    if let Some(s) = args.sizes.size {
        return Ok(vec![Shape::square(size("--size", s)?)]);
    }
    if let Some((m, n, k)) = args.sizes.problem() {
        return Ok(vec![Shape::new(
            size("--m", m)?,
            size("--n", n)?,
            size("--k", k)?,
        )]);
    }
    Ok(D::DEFAULT_PROBLEMS.to_vec())
}

/// The reference of one problem: every output when that is cheap, else sampled outputs.
struct Reference {
    values: Vec<f64>,
    at: Option<Vec<usize>>,
}

impl Reference {
    fn of(a: &[f32], b: &[f32], shape: Shape, seed: u64) -> Self {
        let Shape { m, n, k } = shape;
        if shape.macs() <= reference::FULL_REFERENCE_MAX_MACS as u64 {
            return Self {
                values: reference::matmul(a, b, m, n, k),
                at: None,
            };
        }
        let at = reference::sample_outputs(m, n, reference::RANDOM_SAMPLES, seed);
        Self {
            values: reference::matmul_at(a, b, m, n, k, &at),
            at: Some(at),
        }
    }
}

/// One day's run over its problems.
struct Run<'r, D> {
    gpu: &'r Gpu,
    cublas: &'r Cublas,
    common: &'r CommonArgs,
    day: &'r D,
    versions: &'r [&'static str],
    quiet: bool,
    progress: &'r ProgressBar,
}

impl<D: MatmulDay> Run<'_, D> {
    /// Checks and times cuBLAS and every version on one shape.
    fn problem(&self, shape: Shape) -> Result<DayReport> {
        let Shape { m, n, k } = shape;
        let seed = self.common.seed;
        let a: Vec<f32> = inputs::uniform(m * k, -1.0, 1.0, seed);
        let b: Vec<f32> = inputs::uniform(k * n, -1.0, 1.0, seed.wrapping_add(1));
        let reference = Reference::of(&a, &b, shape, seed.wrapping_add(2));
        let checked = match &reference.at {
            None => "every output checked".to_string(),
            Some(at) => format!("{} sampled outputs checked", at.len()),
        };
        let description = format!("{} ({checked})", shape.describe());
        let bytes = shape.min_bytes();
        let problem = Problem {
            flops_per_run: Some(shape.flops()),
            ..day_problem(D::DAY, D::TITLE, description, shape.key(), bytes)
        };
        let mut session = Session::new(self.gpu, self.common, problem)?.with_ceiling(CEILING);
        if self.quiet {
            session = session.quiet();
        }
        session.save_input("a", &[m, k], &a)?;
        session.save_input("b", &[k, n], &b)?;
        let a_dev = self.gpu.upload(&a)?;
        let b_dev = self.gpu.upload(&b)?;
        drop((a, b));
        let mut c = self.gpu.alloc_poisoned::<f32>(m * n)?;
        let out_shape = [m, n];
        let expected = Expected {
            values: &reference.values,
            shape: &out_shape,
            tolerance: reference::tolerance(k),
            at: reference.at.as_deref(),
        };

        self.progress
            .set_message(format!("{CEILING} on {}", shape.describe()));
        let ceiling = Version {
            name: CEILING,
            kernel: None,
            global_bytes: None,
        };
        session.run_version(ceiling, &mut c, &expected, |c| {
            self.cublas.sgemm(m, n, k, &a_dev, &b_dev, c)
        })?;
        self.progress.inc(1);

        let problem = shape.describe();
        for &name in self.versions {
            self.progress.set_message(format!("{name} on {problem}"));
            let plan = self.day.plan(self.gpu, name, shape);
            let plan = session
                .plan_or_skip(name, plan)
                .with_context(|| format!("planning `{name}` on {problem}"))?;
            if let Some(mut plan) = plan {
                let version = Version {
                    name,
                    kernel: Some((plan.kernel, plan.shape)),
                    global_bytes: Some(plan.global_bytes),
                };
                let launch = &mut plan.launch;
                session.run_version(version, &mut c, &expected, |c| launch(&a_dev, &b_dev, c))?;
            }
            self.progress.inc(1);
        }
        if reference.at.is_none() {
            session.save_reference(&out_shape, &reference.values)?;
        }
        Ok(session.finish())
    }

    /// The sweep's plot (TFLOP/s against size, one line per version and cuBLAS, the FP32
    /// peak) and a summary table on stdout.
    fn plot_sweep(
        &self,
        plot: &std::path::Path,
        shapes: &[Shape],
        reports: &[DayReport],
    ) -> Result<()> {
        let (gpu, versions) = (self.gpu, self.versions);
        let names = std::iter::once(CEILING).chain(versions.iter().copied());
        // The sweep's problems are square: x is their size.
        let size_of = sweep::x_by_report(reports, shapes.iter().map(|s| s.k as f64));
        let series = sweep::version_series(reports, names, size_of, |row| row.tflops);
        let peak = gpu.info.fp32_peak_tflops();
        let title = sweep::plot_title(D::DAY, D::TITLE, "square f32 matmul", &gpu.info.name);
        let line_plot = LinePlot {
            title: &title,
            x_label: "m = n = k",
            y_label: "TFLOP/s (2mnk per run)",
            log2_x: true,
            series: &series,
            hlines: &[HLine {
                name: format!("FP32 peak {peak:.1} TFLOP/s"),
                y: peak,
            }],
        };
        sweep::publish(plot, &line_plot, "size", "TFLOP/s", 2)
    }
}

/// The roofline of one problem's versions: each at the intensity of what it asks of global
/// memory, under the measured copy bandwidth and the FP32 peak.
fn plot_roofline<D: MatmulDay>(
    path: &std::path::Path,
    gpu: &Gpu,
    report: &DayReport,
) -> Result<()> {
    let flops = report.flops_per_run.unwrap_or(0) as f64;
    let points: Vec<RooflinePoint> = report
        .rows
        .iter()
        .filter_map(|r| {
            Some(RooflinePoint {
                name: r.version.clone(),
                intensity: flops / r.global_bytes? as f64,
                tflops: r.tflops?,
            })
        })
        .collect();
    let bandwidth = gpu.copy_ceiling_gbs()?;
    let peak = gpu.info.fp32_peak_tflops();
    let title = format!("{} roofline: {}, {}", D::DAY, report.key, gpu.info.name);
    roofline::write_svg(
        path,
        &Roofline {
            title: &title,
            x_label: "FLOP per byte asked of global memory",
            bandwidth_gbs: bandwidth,
            peak_tflops: peak,
            points: &points,
        },
    )?;
    let ridge = roofline::ridge_intensity(bandwidth, peak);
    println!(
        "roofline: {} (copy {bandwidth:.0} GB/s, FP32 peak {peak:.1} TFLOP/s, ridge {ridge:.1} \
         FLOP/B)",
        path.display()
    );
    for p in &points {
        let roof = roofline::attainable_tflops(bandwidth, peak, p.intensity);
        let bound = if p.intensity < ridge {
            "memory"
        } else {
            "compute"
        };
        println!(
            "  {:>20}  {:8.1} FLOP/B  {:6.2} TFLOP/s  roof {roof:6.2} ({bound})  {:5.1}% of it",
            p.name,
            p.intensity,
            p.tflops,
            p.tflops / roof * 100.0
        );
    }
    Ok(())
}

/// Shapes of the GPU tests: 1 x 1 x 1, primes and odd sizes no tile divides, a dimension of 1
/// in each place, tile multiples, and 1000 x 1001 x 999.
pub const TEST_SHAPES: &[Shape] = &[
    Shape::new(1, 1, 1),
    Shape::new(17, 17, 17),
    Shape::new(127, 255, 63),
    Shape::new(1, 300, 257),
    Shape::new(300, 1, 257),
    Shape::new(65, 33, 1),
    Shape::new(64, 64, 64),
    Shape::new(256, 512, 128),
    Shape::new(130, 260, 516),
    Shape::new(1000, 1001, 999),
    Shape::new(1024, 1024, 1024),
];

/// The GPU test of a matmul day: cuBLAS and every version on every test shape it does not
/// refuse, against the full f64 reference.
pub fn test_every_version<D: MatmulDay>() {
    let Some(gpu) = testing::gpu_or_skip(&format!("{} GPU correctness", D::DAY)) else {
        return;
    };
    let day = D::load(&gpu).expect("kernels load");
    let cublas = Cublas::open(&gpu).expect("cuBLAS opens");
    let mut ran = vec![0usize; D::VERSIONS.len()];
    for (i, &shape) in TEST_SHAPES.iter().enumerate() {
        let Shape { m, n, k } = shape;
        let a: Vec<f32> = inputs::uniform(m * k, -1.0, 1.0, 2 * i as u64);
        let b: Vec<f32> = inputs::uniform(k * n, -1.0, 1.0, 2 * i as u64 + 1);
        let values = reference::matmul(&a, &b, m, n, k);
        let out_shape = [m, n];
        let expected = Expected::full(&values, &out_shape, reference::tolerance(k));
        let (a_dev, b_dev) = (
            gpu.upload(&a).expect("upload"),
            gpu.upload(&b).expect("upload"),
        );
        let mut c = gpu.alloc_poisoned::<f32>(m * n).expect("alloc");
        let check = |name: &str, got: Result<Vec<f32>>| {
            let got = got.unwrap_or_else(|e| panic!("{name} {m}x{n}x{k}: {e:#}"));
            let report = expected.check(&got);
            assert!(report.passed(), "{name} {m} x {n} x {k}: {report}");
        };
        let got = launch_and_read(&gpu, &mut c, &mut |c| {
            cublas.sgemm(m, n, k, &a_dev, &b_dev, c)
        });
        check(CEILING, got);
        for (v, &version) in D::VERSIONS.iter().enumerate() {
            let mut plan = match day.plan(&gpu, version, shape) {
                Ok(plan) => plan,
                Err(e) if e.is::<Refused>() => continue,
                Err(e) => panic!("{version} {m}x{n}x{k}: {e:#}"),
            };
            let got = launch_and_read(&gpu, &mut c, &mut |c| (plan.launch)(&a_dev, &b_dev, c));
            check(version, got);
            ran[v] += 1;
        }
    }
    for (version, ran) in D::VERSIONS.iter().zip(ran) {
        assert!(
            ran >= TEST_SHAPES.len() / 2,
            "{version} ran on only {ran} of {} test shapes",
            TEST_SHAPES.len()
        );
    }
}

/// A version that is one kernel `(const float* A, const float* B, float* C, int m, int n,
/// int k)` on a 2-D grid of `grid` (x, y) blocks of `block` threads, which bounds-checks its
/// own loads and stores (every kernel of days 6-9). A grid taller than 65535 blocks is
/// refused (the version is skipped for that shape).
pub fn plan_kernel<'a>(
    gpu: &'a Gpu,
    kernel: &'a Kernel,
    shape: Shape,
    grid: (usize, usize),
    block: (u32, u32, u32),
    dynamic_shared_bytes: u32,
    global_bytes: u64,
) -> Result<Plan<'a>> {
    let (blocks_x, blocks_y) = grid;
    if blocks_y > 65535 || blocks_x > i32::MAX as usize {
        return Err(Refused(format!(
            "{} on {}: a grid of {blocks_x} x {blocks_y} blocks is over the device's limits \
             (65535 in y)",
            kernel.name,
            shape.describe()
        ))
        .into());
    }
    let launch_shape = LaunchShape {
        grid: (blocks_x as u32, blocks_y as u32, 1),
        block,
        dynamic_shared_bytes,
    };
    Ok(Plan {
        kernel,
        shape: launch_shape,
        global_bytes,
        launch: Box::new(move |a, b, c| {
            check_sizes(a.len(), b.len(), c.len(), shape)?;
            let dim = |v: usize| i32::try_from(v).context("matmul dimensions must be below 2^31");
            let (m, n, k) = (dim(shape.m)?, dim(shape.n)?, dim(shape.k)?);
            // SAFETY: the kernel takes (const float* A, const float* B, float* C, int m, int n,
            // int k) by this function's contract; the buffers were checked to hold m x k,
            // k x n and m x n floats, and the kernel bounds-checks every access.
            unsafe { matmul_kernel(gpu, kernel, &launch_shape, a, b, c, m, n, k) }
        }),
    })
}

crate::kernel_args! {
    /// Every kernel [`plan_kernel`] plans: `(const float* A, const float* B, float* C, int m,
    /// int n, int k)`.
    fn matmul_kernel(
        a: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        c: &mut CudaSlice<f32>,
        m: i32,
        n: i32,
        k: i32,
    );
}

/// Checks the buffers of a matmul launch against its shape.
pub fn check_sizes(a: usize, b: usize, c: usize, shape: Shape) -> Result<()> {
    let Shape { m, n, k } = shape;
    if m == 0 || n == 0 || k == 0 {
        anyhow::bail!("matmul: {m} x {n} x {k} is empty; every dimension must be at least 1");
    }
    if a != m * k || b != k * n || c != m * n {
        anyhow::bail!(
            "matmul: buffers of {a}, {b} and {c} elements do not hold {m} x {k}, {k} x {n} and \
             {m} x {n}"
        );
    }
    Ok(())
}

/// Requests every matmul day refuses before opening a GPU, with exit 2 and one `error:`
/// line saying this: `(arguments, what the error must say)`. Each day's `tests/cli.rs`
/// runs them (`testing::assert_all_refused`) beside what only that day refuses.
pub const REFUSED_REQUESTS: &[(&str, &str)] = &[
    ("--size 0", "'--size <SIZE>': must be at least 1"),
    ("--m 0 --n 4 --k 4", "'--m <M>': must be at least 1"),
    ("--m 4 --n 4 --k 0", "'--k <K>': must be at least 1"),
    ("--size 2147483648", "--size 2147483648 is too large"),
    (
        "--m 4 --n 18446744073709551615 --k 4",
        "--n 18446744073709551615 is too large",
    ),
    (
        "--size 2147483647",
        "2 m n k: 2 x 2147483647 x 2147483647 x 2147483647 is too large",
    ),
    ("--m 2000000000 --n 2000000000 --k 1", "the matrices:"),
    ("--m 1000000 --n 1000000 --k 1000", "of host memory"),
    ("--size 4 --m 4", "cannot be used with"),
    (
        "--m 4 --n 4",
        "the following required arguments were not provided",
    ),
    ("--sweep --size 4", "cannot be used with"),
    ("--size 4 --kernel nope", "there is no kernel `nope` here"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_bytes_and_keys() {
        let s = Shape::new(2, 3, 4);
        assert_eq!(s.flops(), 48);
        assert_eq!(s.min_bytes(), 4 * (8 + 12 + 6));
        assert_eq!(s.key(), "sgemm/f32/2x3x4");
        // One output per "tile": A read n times, B m times.
        assert_eq!(s.tiled_bytes(1, 1), 4 * (8 * 3 + 12 * 2 + 6));
        // One tile covering everything reads each input once.
        assert_eq!(s.tiled_bytes(64, 64), s.min_bytes());
    }

    #[test]
    fn sizes_are_checked() {
        let s = Shape::new(2, 3, 4);
        assert!(check_sizes(8, 12, 6, s).is_ok());
        assert!(check_sizes(8, 12, 7, s).is_err());
        assert!(check_sizes(0, 0, 0, Shape::new(0, 3, 4)).is_err());
    }

    #[test]
    fn the_sweep_doubles_from_256_to_8192() {
        assert_eq!(SWEEP_SIZES.first(), Some(&256));
        assert_eq!(SWEEP_SIZES.last(), Some(&8192));
        assert!(SWEEP_SIZES.windows(2).all(|w| w[0] < w[1]));
    }
}
