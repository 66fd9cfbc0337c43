"""flash_attention on the GPU: O and the three gradients against an f64 reference.

The reference is the plain formula per sequence and head, in float64 from the same 16-bit
inputs; the tolerances are days 10 and 20's own: O within ``1e-5 + 2u|O| + (u + 2^-12) m``
per element (``u`` the dtype's unit roundoff, ``m = sum_j P_ij |V_jc|``, what rounding P to
16 bits before ``P V`` can move it by) and a relative L2 error under ``2u``; each gradient
within a share of its root mean square plus ``u`` times the sum of its terms' magnitudes
(dS counted before its two parts cancel), and a relative L2 error under 2% (bf16) or 0.4%
(f16). A scale of one's own multiplies q (rounded to its dtype) before the kernels: the
reference takes that rounded q with the default scale, and scales its gradient back.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import day_kernels as dk
from day_kernels import flash_attention
from gpu_checks import offset_copy

UNIT = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
GRAD = {torch.bfloat16: (2.5e-2, 4e-2, 2e-2), torch.float16: (4e-3, 8e-3, 4e-3)}


def reference(q, k, v, do, lq, lk, causal, scale):
    """O, dQ, dK, dV in float64 and each one's magnitudes, for packed [total, heads, d]."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    outs = {name: [] for name in ("o", "m", "dq", "mq", "dk", "mk", "dv", "mv")}
    qs, ks = 0, 0
    for nq, nk in zip(lq, lk):
        qi = q[qs:qs + nq].double().transpose(0, 1)  # [heads, nq, d]
        ki = k[ks:ks + nk].double().transpose(0, 1).repeat_interleave(group, 0)
        vi = v[ks:ks + nk].double().transpose(0, 1).repeat_interleave(group, 0)
        doi = do[qs:qs + nq].double().transpose(0, 1)
        s = scale * qi @ ki.transpose(1, 2)
        if causal:
            # Bottom-right: query i sees keys j <= i + nk - nq.
            i = torch.arange(nq, device=q.device)[:, None]
            j = torch.arange(nk, device=q.device)[None, :]
            s = s.masked_fill(j > i + nk - nq, float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that sees no key is all zeros
        o = p @ vi
        dp = doi @ vi.transpose(1, 2)
        delta = (doi * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        # dS's terms before they cancel: what the rounding of dS, and D's sum over the 16-bit
        # O, move it by, however small dS itself is (a causal row that sees a few keys).
        ds_terms = p * (dp.abs() + (doi * o).abs().sum(-1, keepdim=True))
        dq = scale * ds @ ki
        dk = scale * ds.transpose(1, 2) @ qi
        dv = p.transpose(1, 2) @ doi

        def per_kv(x):  # sum the query heads of each kv head's group
            return x.reshape(kv_heads, group, nk, -1).sum(1)

        outs["o"].append(o)
        outs["m"].append(p @ vi.abs())
        outs["dq"].append(dq)
        outs["mq"].append(scale * ds_terms @ ki.abs())
        outs["dk"].append(per_kv(dk))
        outs["mk"].append(per_kv(scale * ds_terms.transpose(1, 2) @ qi.abs()))
        outs["dv"].append(per_kv(dv))
        outs["mv"].append(per_kv(p.transpose(1, 2) @ doi.abs()))
        qs, ks = qs + nq, ks + nk
    return {name: torch.cat([x.transpose(0, 1) for x in xs]) for name, xs in outs.items()}


def check(name, got, want, atol, rtol, slack, max_rel_l2):
    got = got.double()
    err = (got - want).abs()
    bound = atol + rtol * want.abs() + slack
    worst = (err - bound).flatten().argmax()
    assert (err <= bound).all(), (
        f"{name}: {int((err > bound).sum())} elements out of tolerance; worst at flat index "
        f"{int(worst)}: got {got.flatten()[worst].item():.6g}, want {want.flatten()[worst].item():.6g}"
    )
    rel_l2 = (got - want).norm() / want.norm().clamp_min(1e-30)
    assert rel_l2 <= max_rel_l2, f"{name}: relative L2 error {rel_l2:.3g} over {max_rel_l2}"


def run_and_check(lq, lk, heads, kv_heads, d, causal, dtype, packed, scale=None, seed=0):
    torch.manual_seed(seed)
    dev = "cuda"
    tq, tk = sum(lq), sum(lk)
    q = (torch.rand(tq, heads, d, device=dev) * 4 - 2).to(dtype)
    k = (torch.rand(tk, kv_heads, d, device=dev) * 4 - 2).to(dtype)
    v = (torch.rand(tk, kv_heads, d, device=dev) * 2 - 1).to(dtype)
    do = (torch.rand(tq, heads, d, device=dev) * 2 - 1).to(dtype)
    qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
    if packed:
        cu_q = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32)
        cu_k = [0] + [int(x) for x in torch.tensor(lk).cumsum(0)]
        o = flash_attention(qq, kk, vv, causal=causal, scale=scale, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        o.backward(do)
    else:
        b = len(lq)
        shape = lambda x, n: x.view(b, n, x.shape[1], d)  # noqa: E731
        o = flash_attention(shape(qq, lq[0]), shape(kk, lk[0]), shape(vv, lk[0]), causal=causal, scale=scale)
        o.backward(shape(do, lq[0]))
        o = o.view(tq, heads, d)
    ratio = 1.0 if scale is None else scale * math.sqrt(d)
    q_seen = q * ratio if ratio != 1.0 else q  # what the kernels get, as the layer rounds it
    want = reference(q_seen, k, v, do, lq, lk, causal, 1 / math.sqrt(d))
    want["dq"], want["mq"] = want["dq"] * ratio, want["mq"] * ratio
    u = UNIT[dtype]
    check("O", o, want["o"], 1e-5, 2 * u, (u + 2**-12) * want["m"], 2 * u)
    share, rtol, rel_l2 = GRAD[dtype]
    for name, grad, mag in (("dQ", qq.grad, "mq"), ("dK", kk.grad, "mk"), ("dV", vv.grad, "mv")):
        ref = want[name.lower()]
        rms = ref.pow(2).mean().sqrt().item()
        check(name, grad, ref, max(share * rms, 1e-6), rtol, u * want[mag], rel_l2)


CASES = [
    # (seqlens q, seqlens k, heads, kv heads, head dim, causal, dtype)
    ([128, 128], [128, 128], 4, 4, 64, False, torch.bfloat16),
    ([1000], [1000], 8, 2, 128, True, torch.bfloat16),
    ([77, 77, 77], [200, 200, 200], 4, 1, 64, True, torch.float16),
    ([300], [300], 2, 2, 256, False, torch.bfloat16),
    ([333], [333], 6, 3, 256, True, torch.float16),
    # 4 x 16 heads x 16 query tiles: far more work items than SMs.
    ([2048] * 4, [2048] * 4, 16, 16, 64, True, torch.bfloat16),
]


@pytest.mark.parametrize("lq,lk,heads,kv_heads,d,causal,dtype", CASES)
def test_batched_layout(lq, lk, heads, kv_heads, d, causal, dtype):
    run_and_check(lq, lk, heads, kv_heads, d, causal, dtype, packed=False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_packed_sequences_of_different_lengths(causal, d):
    run_and_check([5, 300, 1, 718], [5, 300, 1, 718], 8, 4, d, causal, torch.bfloat16, packed=True)


def test_packed_with_more_keys_than_queries_and_an_empty_query_sequence():
    run_and_check([64, 0, 17], [100, 33, 17], 4, 2, 64, True, torch.bfloat16, packed=True)


def test_a_scale_of_ones_own():
    run_and_check([200], [200], 4, 4, 64, False, torch.bfloat16, packed=False, scale=0.3)


def test_matches_pytorch_sdpa_on_equal_lengths():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 512, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ours = flash_attention(q, k, v, causal=True)
    theirs = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
    ).transpose(1, 2)
    assert (ours.float() - theirs.float()).abs().max() < 3e-2


def test_the_deterministic_backward_gives_the_same_bits_twice():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 700, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    do = torch.randn_like(q)
    grads = []
    for _ in range(2):
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
        flash_attention(qq, kk, vv, causal=True, deterministic=True).backward(do)
        grads.append(torch.cat([qq.grad.flatten(), kk.grad.flatten(), vv.grad.flatten()]))
    assert torch.equal(grads[0], grads[1])


def test_a_broadcast_upstream_gradient_is_taken():
    # o.sum() hands the backward an expanded (stride 0) gradient.
    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    flash_attention(q, k, v).sum().backward()
    assert torch.isfinite(q.grad).all() and k.grad.abs().sum() > 0


def test_a_head_dim_no_kernel_takes_is_a_value_error():
    q = torch.zeros(1, 16, 2, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="96"):
        flash_attention(q, q, q)


def test_shapes_that_do_not_match_are_value_errors():
    q = torch.zeros(2, 16, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.zeros(2, 16, 3, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not a multiple"):
        flash_attention(q, k, k)
    with pytest.raises(ValueError, match="ends at 40 but the tensor holds 32"):
        flash_attention(q.view(32, 4, 64), q.view(32, 4, 64), q.view(32, 4, 64),
                        cu_seqlens_q=[0, 16, 40], cu_seqlens_k=[0, 16, 32])
    with pytest.raises(TypeError, match="share one dtype"):
        flash_attention(q, q.half(), q)


@pytest.mark.skipif(
    torch.cuda.get_device_capability() != (9, 0), reason="fa_hopper runs on Hopper only"
)
def test_a_tensor_not_16_byte_aligned_is_a_value_error_on_hopper():
    # One element into its storage: contiguous, but not 16-byte aligned. fa_hopper's TMA reads
    # q (and k, v, dO) by boxes, and its backward's preprocess reads O in 16-byte pieces.
    q = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="16-byte"):
        dk.ops.flash_attention_forward(offset_copy(q), q, q, None, None, False)
    out, lse = dk.ops.flash_attention_forward(q, q, q, None, None, False)
    with pytest.raises(ValueError, match="16-byte"):
        dk.ops.flash_attention_backward(out, q, q, q, offset_copy(out), lse, None, None, False, False)
