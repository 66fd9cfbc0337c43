"""The per-day table: for each day, its problems (a small one with odd sizes and a medium one,
more where the day has several dtypes, ops or passes), each a few seconds on the GPU.

Adding a day is adding an entry here whose problems come from a family module's constructor
(or a new module with a `check`); see verify/README.md.
"""

import activations
import attention
import conv
import cross_entropy
import gemv
import int8_gemm
import matmul
import movement
import norms
import nvfp4
import quantize
import reductions
import softmax
import topk
import vector_add


def softmax_day(dtypes):
    """A small problem with odd sizes in each dtype, a medium one in the first and the last."""
    problems = [softmax.problem(f"small-{d}", 7, 1000, d) for d in dtypes]
    problems.append(softmax.problem(f"medium-{dtypes[0]}", 1024, 4096, dtypes[0]))
    if len(dtypes) > 1:
        problems.append(softmax.problem(f"medium-{dtypes[-1]}", 1024, 4096, dtypes[-1]))
    return problems


def sgemm_day():
    # 1024^3 = 2^30 multiply-adds: the largest problem whose full f64 reference is saved.
    return [matmul.sgemm("small", 67, 45, 129), matmul.sgemm("medium", 1024, 1024, 1024)]


def norm_day(kind):
    return [
        norms.problem("small-fwd-bf16", kind, "forward", 7, 1000, "bf16"),
        norms.problem("small-bwd-f32", kind, "backward", 7, 1000, "f32"),
        norms.problem("medium-fwd-f16", kind, "forward", 1024, 4096, "f16"),
        norms.problem("medium-bwd-bf16", kind, "backward", 1024, 4096, "bf16"),
    ]


def attention_day(day):
    p = attention.problem
    problems = [
        # Variable lengths, grouped-query heads, head dim 64, f16.
        p("small-varlen-gqa", day, [1, 17, 100], 4, 64, "f16", kv_heads=2, uniform=False),
        # More keys than queries under a bottom-right causal mask, head dim 128, bf16.
        p("small-causal", day, [37, 37], 2, 128, "bf16", seqlen_k=50, causal=True),
        # Every head dim the Hopper kernels take, causal and not (with the two above): their
        # shared-memory hand-offs differ by head dim (one Q stage at 256, two below).
        p("small-d64-causal", day, [100, 100], 4, 64, "bf16", causal=True),
        p("small-d128", day, [137, 137], 2, 128, "bf16"),
        p("small-d256", day, [200], 2, 256, "bf16"),
        p("small-d256-causal", day, [200], 2, 256, "bf16", causal=True),
        # 160 work items for 132 persistent blocks: some blocks take a second item, so the one
        # Q stage's item slot is rewritten before the end-of-work mark.
        p("small-d256-many-items", day, [200] * 40, 2, 256, "bf16", causal=True),
        # 2 x 512 x 4 heads x 128: 2^28 row-key-dim products, the largest the days check in full.
        p("medium-causal", day, [512, 512], 4, 128, "bf16", causal=True),
    ]
    if day == "day20":
        problems.append(p("medium-deterministic", day, [512, 512], 4, 128, "bf16", deterministic=True))
    return problems


DAY13_SMALL = ["gelu_tanh", "gelu_erf", "swiglu", "gelu_tanh_bwd", "gelu_erf_bwd", "swiglu_bwd"]

DAYS = {
    "day00": [vector_add.problem("small", 1001), vector_add.problem("medium", (1 << 22) - 3)],
    "day01": softmax_day(["f32"]),
    "day02": softmax_day(["f32"]),
    "day03": softmax_day(["f32", "f16", "bf16"]),
    "day04": softmax_day(["f32", "f16", "bf16"]) + [softmax.problem("long-rows-f32", 8, 262147, "f32")],
    "day05": softmax_day(["f32", "f16", "bf16"]),
    "day06": sgemm_day(),
    "day07": sgemm_day(),
    "day08": sgemm_day(),
    "day09": sgemm_day(),
    "day10": attention_day("day10"),
    "day11": norm_day("rms"),
    "day12": norm_day("layer"),
    "day13": [activations.problem(f"small-{op}", op, 7, 1000, "bf16") for op in DAY13_SMALL]
    + [
        activations.problem("small-bias_dropout_add", "bias_dropout_add", 7, 1000, "f16"),
        activations.problem("medium-gelu_tanh", "gelu_tanh", 1024, 4096, "bf16"),
        activations.problem("medium-swiglu_bwd-f16", "swiglu_bwd", 1024, 4096, "f16"),
        activations.problem("medium-gelu_erf_bwd-f32", "gelu_erf_bwd", 1024, 4096, "f32"),
        # The rectifiers and SiLU: defaults, then torch's flags given other values.
        activations.problem("small-relu_bwd-f16", "relu_bwd", 7, 1000, "f16"),
        activations.problem("small-silu-f32", "silu", 7, 1000, "f32"),
        activations.problem("small-silu_bwd", "silu_bwd", 7, 1000, "bf16"),
        activations.problem("small-leaky_relu_bwd", "leaky_relu_bwd", 7, 1000, "bf16", negative_slope=0.2),
        activations.problem("small-hardtanh", "hardtanh", 7, 1000, "f16", min_val=-0.5, max_val=2.0),
        activations.problem("medium-relu", "relu", 1024, 4096, "bf16"),
        activations.problem("medium-leaky_relu", "leaky_relu", 1024, 4096, "f32"),
        activations.problem("medium-hardtanh_bwd", "hardtanh_bwd", 1024, 4096, "bf16"),
        activations.problem("medium-silu_bwd-f16", "silu_bwd", 1024, 4096, "f16"),
    ],
    "day14": [
        gemv.problem("small", 7, 1001),
        gemv.problem("medium", 1024, 4096),
        gemv.problem("tall", 100003, 64),
    ],
    "day15": [
        quantize.quantize("small-sym", "sym", 7, 1000),
        quantize.quantize("medium-asym", "asym", 1024, 4096),
        quantize.dequantize("small-dequantize", 7, 1000),
        # k * 255^2 stays under 2^24, so every int32 output is exact in the f32 .npy.
        quantize.int8_matmul("small-int8-matmul", 67, 45, 129, -3, 7),
        quantize.int8_matmul("medium-int8-matmul", 256, 256, 256, -3, 7),
    ],
    "day16": [
        reductions.problem("small-sum", "sum", 1001),
        reductions.problem("medium-sum", "sum", (1 << 22) - 3),
        reductions.problem("small-dot", "dot", 1001),
        reductions.problem("medium-dot", "dot", (1 << 22) - 3),
        reductions.problem("small-count", "count", 1001, value=7),
        reductions.problem("small-segment-sum", "segment-sum", 7000, segment_len=1000),
        reductions.problem("medium-segment-sum", "segment-sum", 1 << 22, segment_len=4096),
        reductions.problem("small-scan", "scan", 1001),
        reductions.problem("medium-scan", "scan", (1 << 22) - 3),
    ],
    "day17": [
        movement.problem("small-copy", "copy", rows=7, cols=1000),
        movement.problem("medium-transpose", "transpose", rows=1024, cols=4097),
        movement.problem("small-transpose", "transpose", rows=7, cols=1000),
        movement.problem("small-reverse", "reverse", n=1001),
    ],
    "day18": [
        matmul.tensor_core("small", 67, 45, 136, "bf16"),
        matmul.tensor_core("small-f16-a-transposed", 67, 45, 136, "f16", a="transposed", b="as-is"),
        matmul.tensor_core("medium", 1024, 1024, 1024, "bf16"),
    ],
    "day19": [
        cross_entropy.problem(
            "small-fused", "fused", 17, 64, 1000, chunk=8, label_smoothing=0.1, z_loss=1e-4,
            ignore_fraction=0.2,
        ),
        cross_entropy.problem("medium-fused", "fused", 256, 512, 8192, chunk=64),
        cross_entropy.problem("small-ce", "ce", 17, 64, 1000, label_smoothing=0.1, z_loss=1e-4, ignore_fraction=0.2),
        cross_entropy.problem("medium-ce", "ce", 256, 64, 32000),
    ],
    "day20": attention_day("day20"),
    "day21": [
        # Odd lengths and images that end tiles and 16-byte packs mid-way; even filters (width
        # 4, 4x4) put their extra zero of padding after, which a mirrored kernel gets wrong.
        conv.conv1d("small-conv1d-even-bf16", 1001, 4, "bf16"),
        conv.conv1d("small-conv1d-f32", 1001, 7, "f32"),
        conv.conv2d("small-conv2d-even-f32", (33, 130), (4, 4), "f32"),
        conv.conv2d("small-conv2d-bf16", (33, 130), (3, 5), "bf16"),
        conv.conv2d_nchw("small-nchw-bf16", 2, 3, 9, (20, 37), (3, 3), "bf16"),
        # The widest filter vec_regs unrolls for (31 taps, 7x7); 16 x 3 x 5 x 5 fits __constant__.
        conv.conv1d("medium-conv1d-f32", 1 << 20, 31, "f32"),
        conv.conv2d("medium-conv2d-bf16", (1024, 1024), (7, 7), "bf16"),
        conv.conv2d_nchw("medium-nchw-f32", 4, 3, 16, (128, 128), (5, 5), "f32"),
    ],
    "day22": [
        # Widths that end warps and 16-byte packs mid-way; bf16 rows of a vocabulary's width
        # have many ties; k above warp_bitonic's 128 runs radix_select and sort_row alone.
        topk.problem("small-f32", 3, 1001, 7, "f32"),
        topk.problem("small-bf16", 5, 4097, 64, "bf16"),
        topk.problem("medium-vocab-bf16", 64, 128256, 50, "bf16"),
        topk.problem("medium-large-k-f32", 4, 262147, 1000, "f32"),
    ],
    "day23": [
        # k a multiple of 16 but not of the 128-byte k step, m and n off every tile; k 255^2
        # and k 128^2 stay under 2^24, so every int32 output is exact in the f32 .npy.
        int8_gemm.problem("small-zp-s32", 67, 45, 144, za=-3, zb=7),
        int8_gemm.problem("small-per-channel-bf16", 67, 45, 144, out="bf16", za=-3, per_channel=True),
        int8_gemm.problem("medium-s32", 256, 256, 256),
    ],
    "day24": [
        # K = 48 and 4112 are not multiples of 32 (the 8-byte path); n = 7 ends a 4-row warp
        # mid-way; the medium one is Llama's 14336 x 4096 cut to a few seconds.
        nvfp4.gemv("small-k48", 7, 48),
        nvfp4.gemv("small-k4112", 129, 4112),
        nvfp4.gemv("medium", 1024, 4096),
    ],
}
