//! `cargo bench -p day00`: criterion statistics for each vector-add version, timed on the GPU
//! with CUDA events (`iter_custom`), throughput in bytes. Skips with one line without a GPU.

use common::{measure::bench, measure::inputs, testing};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use day00::{VectorAdd, Version};

fn vector_add(c: &mut Criterion) {
    let Some(gpu) = testing::gpu_or_skip("day00 criterion bench") else {
        return;
    };
    let day = VectorAdd::load(&gpu).expect("kernels load");
    let n = 1 << 26;
    let a = gpu
        .upload(&inputs::uniform::<f32>(n, -1.0, 1.0, 0))
        .unwrap();
    let b = gpu
        .upload(&inputs::uniform::<f32>(n, -1.0, 1.0, 1))
        .unwrap();
    let mut out = gpu.alloc_poisoned::<f32>(n).unwrap();

    let mut group = c.benchmark_group("day00_vector_add");
    group.throughput(Throughput::Bytes(3 * 4 * n as u64));
    for version in Version::ALL {
        group.bench_function(version.name(), |bencher| {
            bencher.iter_custom(|iters| {
                bench::time_batch(&gpu, iters, || day.launch(&gpu, version, &a, &b, &mut out))
                    .expect("GPU run")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, vector_add);
criterion_main!(benches);
