//! `cargo run --release -p day20 --example train`: one attention layer learns, on the GPU.
//!
//! The task: a "teacher" attention with random Q, K, V produces the target outputs; the
//! student's own Q, K and V (the parameters, f32 master copies) start elsewhere and learn to
//! reproduce them under the loss `0.5 |O - O*|^2 / n`, so `dO = (O - O*) / n`. Each step runs
//! the fastest forward and backward the GPU has (`fa_hopper` for both on an H100, `fa2_mma`
//! elsewhere: [`FlashAttention::fastest`]) in bf16; the loss, dO and the
//! Adam update are small and done on the CPU. The first step's gradients are checked against
//! the naive backward, and the loss must fall: otherwise the example exits with an error.

use std::process::ExitCode;

use anyhow::{Result, bail};
use common::cli::run_main;
use common::measure::check;
use common::reference::attention::AttentionShape;
use common::session::launch_and_read;
use common::{Gpu, measure::inputs};
use cudarc::driver::CudaSlice;
use day20::{BackwardProblem, BackwardTensors, FlashAttention, Mode, Tensors, Version};
use half::bf16;

const STEPS: usize = 300;
const LEARNING_RATE: f32 = 0.03;

/// Adam on one parameter tensor.
struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
}

impl Adam {
    fn new(n: usize) -> Self {
        Self {
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }

    fn step(&mut self, param: &mut [f32], grad: &[bf16], t: usize) {
        let (b1, b2) = (0.9f32, 0.999f32);
        let (c1, c2) = (1.0 - b1.powi(t as i32), 1.0 - b2.powi(t as i32));
        for i in 0..param.len() {
            let g = grad[i].to_f32();
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g;
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g * g;
            param[i] -= LEARNING_RATE * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + 1e-8);
        }
    }
}

/// One forward's tensors on the device.
struct Device {
    q: CudaSlice<bf16>,
    k: CudaSlice<bf16>,
    v: CudaSlice<bf16>,
    o: CudaSlice<bf16>,
    lse: CudaSlice<f32>,
}

fn to_bf16(x: &[f32]) -> Vec<bf16> {
    x.iter().map(|&v| bf16::from_f32(v)).collect()
}

fn main() -> ExitCode {
    run_main(train)
}

fn train() -> Result<()> {
    // 4 sequences of 96 queries on 128 keys (causal, bottom-right), 4 query heads on 2 kv heads.
    let shape = AttentionShape::uniform(4, 96, 128, 4, 2, 64, true);
    let (q_len, k_len) = shape.lens();
    let rows = shape.total_q() * shape.heads;
    let gpu = Gpu::open(0)?;
    let day = FlashAttention::load(&gpu)?;
    let (fwd_version, bwd_version) = day.fastest();
    println!(
        "forward {}, backward {} (this GPU's fastest)",
        fwd_version.name(),
        bwd_version.name()
    );
    let problem = BackwardProblem::new(&gpu, &shape)?;

    // O on the host, and the device tensors the backward reads.
    let forward = |q: &[f32], k: &[f32], v: &[f32]| -> Result<(Vec<f32>, Device)> {
        let (q, k, v) = (
            gpu.upload(&to_bf16(q))?,
            gpu.upload(&to_bf16(k))?,
            gpu.upload(&to_bf16(v))?,
        );
        let mut o = gpu.alloc_poisoned::<bf16>(q_len)?;
        let mut lse = gpu.alloc_poisoned::<f32>(rows)?;
        let t = Tensors {
            q: &q,
            k: &k,
            v: &v,
            lse: &mut lse,
            scores: None,
            tickets: None,
        };
        day.forward(&gpu, fwd_version, &problem, t, &mut o)?;
        let host: Vec<f32> = gpu.download(&o)?.iter().map(|x| x.to_f32()).collect();
        Ok((host, Device { q, k, v, o, lse }))
    };

    let teacher: Vec<Vec<f32>> = vec![
        inputs::uniform(q_len, -2.0, 2.0, 1),
        inputs::uniform(k_len, -2.0, 2.0, 2),
        inputs::uniform(k_len, -1.0, 1.0, 3),
    ];
    let (target, ..) = forward(&teacher[0], &teacher[1], &teacher[2])?;
    let mut params: Vec<Vec<f32>> = vec![
        inputs::uniform(q_len, -2.0, 2.0, 11),
        inputs::uniform(k_len, -2.0, 2.0, 12),
        inputs::uniform(k_len, -1.0, 1.0, 13),
    ];
    let mut adam: Vec<Adam> = params.iter().map(|p| Adam::new(p.len())).collect();
    let mut ws = day.workspace(&gpu, bwd_version, &problem)?;
    let mut grads_dev = gpu.alloc_poisoned::<bf16>(q_len + 2 * k_len)?;
    let n = q_len as f32;
    let mut first_loss = None;
    let mut loss = 0.0;
    for step in 1..=STEPS {
        let (o_host, dev) = forward(&params[0], &params[1], &params[2])?;
        loss = o_host
            .iter()
            .zip(&target)
            .map(|(a, b)| 0.5 * ((a - b) as f64).powi(2))
            .sum::<f64>()
            / n as f64;
        first_loss.get_or_insert(loss);
        let d_o: Vec<bf16> = o_host
            .iter()
            .zip(&target)
            .map(|(a, b)| bf16::from_f32((a - b) / n * 1024.0))
            .collect();
        // dO is scaled by 1024 to stay clear of bf16's subnormals; Adam does not mind.
        let d_o = gpu.upload(&d_o)?;
        let launch = |version: Version, ws: &mut day20::Workspace, g: &mut CudaSlice<bf16>| {
            let t = BackwardTensors {
                q: &dev.q,
                k: &dev.k,
                v: &dev.v,
                o: &dev.o,
                d_o: &d_o,
                lse: &dev.lse,
            };
            day.backward(&gpu, version, Mode::Atomic, &problem, t, ws, g)
        };
        let grads = launch_and_read(&gpu, &mut grads_dev, &mut |g| {
            launch(bwd_version, &mut ws, g)
        })?;
        if step == 1 {
            // The tensor-core backward against the naive one (P and dS through memory).
            let mut naive_ws = day.workspace(&gpu, Version::Naive, &problem)?;
            let naive = launch_and_read(&gpu, &mut grads_dev, &mut |g| {
                launch(Version::Naive, &mut naive_ws, g)
            })?;
            let naive: Vec<f64> = naive.iter().map(|x| x.to_f64()).collect();
            for (name, range) in [
                ("dQ", 0..q_len),
                ("dK", q_len..q_len + k_len),
                ("dV", q_len + k_len..q_len + 2 * k_len),
            ] {
                let reference = &naive[range.clone()];
                let tolerance = day20::grad_tolerance(common::dtype::Dtype::Bf16, reference);
                let report =
                    check::compare(&grads[range], reference, &[reference.len()], tolerance);
                println!("step 1 {name}: {} vs naive: {report}", bwd_version.name());
                if !report.passed() {
                    bail!(
                        "{}'s {name} differs from the naive backward's",
                        bwd_version.name()
                    );
                }
            }
        }
        for (p, (param, opt)) in params.iter_mut().zip(adam.iter_mut()).enumerate() {
            let range = match p {
                0 => 0..q_len,
                1 => q_len..q_len + k_len,
                _ => q_len + k_len..q_len + 2 * k_len,
            };
            opt.step(param, &grads[range], step);
        }
        if step == 1 || step % 25 == 0 {
            println!("step {step:4}  loss {loss:.6}");
        }
    }
    let first = first_loss.unwrap_or(0.0);
    println!("loss {first:.6} -> {loss:.6} in {STEPS} steps");
    if loss >= 0.5 * first {
        bail!("the loss did not fall by half: the gradients are wrong or the step too small");
    }
    Ok(())
}
