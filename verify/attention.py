"""Days 10 and 20: attention forward (O) and backward (dQ, dK, dV), bf16 or f16, packed
sequences (`[total, heads, d]`), grouped-query heads, causal masks aligned bottom-right (query
i of a sequence of lq queries and lk keys sees keys j <= i + lk - lq), scale 1/sqrt(d)."""

import numpy as np

from compare import UNIT_ROUNDOFF, Expectation, Part, bound_from
from problem import Problem, VerifyError, flags

# common/src/reference/attention.rs and day10's o_tolerance: what the f32 parts (scores over
# d, exponentials, the online softmax's rescaling, the sums over keys) add, relative to the
# magnitude of the terms: 2^-12, 16 times below bf16's unit roundoff.
F32_PARTS = 2.0**-12


def shape_flags(seqlens_q, seqlen_k, heads, kv_heads, d, causal, dtype, batch_uniform):
    if batch_uniform:
        return flags(
            batch=len(seqlens_q), seqlen=seqlens_q[0], seqlen_k=seqlen_k, heads=heads,
            kv_heads=kv_heads, head_dim=d, causal=causal, dtype=dtype,
        )
    return flags(
        varlen=seqlens_q, seqlen_k=seqlen_k, heads=heads, kv_heads=kv_heads, head_dim=d,
        causal=causal, dtype=dtype,
    )


def problem(label, day, seqlens_q, heads, d, dtype, seqlen_k=None, kv_heads=None, causal=False, uniform=True, deterministic=False):
    """A forward (day10) or backward (day20) problem. `seqlens_q`: query length of each
    sequence (`uniform`: given as --batch/--seqlen, else --varlen); `seqlen_k`: every
    sequence's key length, default its query length."""
    if uniform and len(set(seqlens_q)) != 1:
        raise ValueError("a uniform batch has one sequence length")
    args = shape_flags(seqlens_q, seqlen_k, heads, kv_heads, d, causal, dtype, uniform)
    if deterministic:
        args += ("--deterministic",)
    params = {
        "seqlens_q": tuple(seqlens_q),
        "seqlens_k": tuple(seqlen_k or lq for lq in seqlens_q),
        "heads": heads,
        "kv_heads": kv_heads or heads,
        "d": d,
        "causal": causal,
        "dtype": dtype,
    }
    return Problem(label, args, check_forward if day == "day10" else check_backward, params)


def mask(tc, lq, lk, causal):
    """True where query i sees key j (None: every key)."""
    if not causal:
        return None
    i = tc.torch.arange(lq, device=tc.device)[:, None]
    j = tc.torch.arange(lk, device=tc.device)[None, :]
    return j <= i + (lk - lq)


def sequences(saved, tc, seqlens_q, seqlens_k, heads, kv_heads, d, dtype, with_d_o=False):
    """Per sequence: q, k, v (and dO) as [heads, len, d] tensors, K and V repeated over the
    query heads of their group (head h reads kv head h / (heads / kv_heads))."""
    if any(lq > lk for lq, lk in zip(seqlens_q, seqlens_k)):
        raise VerifyError("queries that see no key (lq > lk) are defined as 0, which SDPA does not do")
    tq, tk = sum(seqlens_q), sum(seqlens_k)
    q = tc.tensor(saved.input("q", (tq, heads, d)), dtype)
    k = tc.tensor(saved.input("k", (tk, kv_heads, d)), dtype)
    v = tc.tensor(saved.input("v", (tk, kv_heads, d)), dtype)
    d_o = tc.tensor(saved.input("d_o", (tq, heads, d)), dtype) if with_d_o else None
    out, q0, k0 = [], 0, 0
    for lq, lk in zip(seqlens_q, seqlens_k):
        out.append(
            {
                "q": q[q0 : q0 + lq].transpose(0, 1).contiguous(),
                "k": k[k0 : k0 + lk].transpose(0, 1).contiguous(),
                "v": v[k0 : k0 + lk].transpose(0, 1).contiguous(),
                "d_o": None if d_o is None else d_o[q0 : q0 + lq].transpose(0, 1).contiguous(),
                "lq": lq,
                "lk": lk,
            }
        )
        q0, k0 = q0 + lq, k0 + lk
    return out


def probabilities(tc, s, causal, scale):
    """P in f32 from the stored q and k, for the magnitudes of the terms."""
    group = s["q"].shape[0] // s["k"].shape[0]
    kf = s["k"].float().repeat_interleave(group, 0)
    scores = (s["q"].float() @ kf.transpose(1, 2)) * scale
    m = mask(tc, s["lq"], s["lk"], causal)
    if m is not None:
        scores = scores.masked_fill(~m, float("-inf"))
    return tc.torch.softmax(scores, dim=-1)


def sdpa(tc, q, k, v, causal, lq, lk):
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    return tc.F.scaled_dot_product_attention(q, k, v, attn_mask=mask(tc, lq, lk, causal))


def packed(parts):
    """[heads, len, d] per sequence back to the packed [total, heads, d], flat."""
    return np.concatenate([p.transpose(1, 0, 2).reshape(-1) for p in parts])


def as_numpy(t):
    return t.detach().to("cpu").double().numpy()


def check_forward(saved, tc, seqlens_q, seqlens_k, heads, kv_heads, d, causal, dtype) -> Expectation:
    scale = 1.0 / np.sqrt(d)
    outs, mags = [], []
    for s in sequences(saved, tc, seqlens_q, seqlens_k, heads, kv_heads, d, dtype):
        outs.append(as_numpy(sdpa(tc, s["q"], s["k"], s["v"], causal, s["lq"], s["lk"])))
        group = heads // kv_heads
        p = probabilities(tc, s, causal, scale)
        mags.append(as_numpy(p @ s["v"].float().abs().repeat_interleave(group, 0)))
    want, mag = packed(outs), packed(mags)
    u = UNIT_ROUNDOFF[dtype]
    # day10: 1e-5 + 2u |O| for O's own rounding, plus (u + 2^-12) sum_j P_ij |V_jc| for P
    # rounded to 16 bits before P V and the f32 parts, however much the terms cancel.
    bound = bound_from(want, 1e-5, 2 * u, (u + F32_PARTS) * mag)
    text = f"1e-5 + {2 * u:.1e} |O| + {u + F32_PARTS:.1e} sum P|V|"
    return Expectation([Part("o", 0, want.size, want, bound, text)])


def check_backward(saved, tc, seqlens_q, seqlens_k, heads, kv_heads, d, causal, dtype) -> Expectation:
    torch = tc.torch
    scale = 1.0 / np.sqrt(d)
    group = heads // kv_heads
    grads = {"dq": [], "dk": [], "dv": []}
    mags = {"dq": [], "dk": [], "dv": []}
    for s in sequences(saved, tc, seqlens_q, seqlens_k, heads, kv_heads, d, dtype, with_d_o=True):
        q, k, v = (s[n].clone().requires_grad_(True) for n in ("q", "k", "v"))
        sdpa(tc, q, k, v, causal, s["lq"], s["lk"]).backward(s["d_o"])
        grads["dq"].append(as_numpy(q.grad))
        grads["dk"].append(as_numpy(k.grad))
        grads["dv"].append(as_numpy(v.grad))
        # The magnitudes of each gradient's terms, in f32: dV = P^T dO; dS = P (dP - D) with
        # dP = dO V^T and D = rowsum(dO O); dQ = scale dS K; dK = scale dS^T Q.
        p = probabilities(tc, s, causal, scale)
        d_o = s["d_o"].float()
        kf, vf = (s[n].float().repeat_interleave(group, 0) for n in ("k", "v"))
        o = p @ vf
        dp = d_o @ vf.transpose(1, 2)
        big_d = (d_o * o).sum(-1, keepdim=True)
        ds_mag = p * (dp.abs() + big_d.abs())
        fold = lambda t: t.reshape(kv_heads, group, *t.shape[1:]).sum(1)  # noqa: E731
        mags["dq"].append(as_numpy(scale * ds_mag @ kf.abs()))
        mags["dk"].append(as_numpy(fold(scale * ds_mag.transpose(1, 2) @ s["q"].float().abs())))
        mags["dv"].append(as_numpy(fold(p.transpose(1, 2) @ d_o.abs())))
    u = UNIT_ROUNDOFF[dtype]
    parts, start = [], 0
    for name in ("dq", "dk", "dv"):
        want, mag = packed(grads[name]), packed(mags[name])
        # day20: every product's 16-bit operands (P, dS, the inputs) err by u relative to
        # their term, the output is rounded once (2u |g| for margin), the f32 sums add 2^-12
        # of the terms; the absolute floor is for gradients that are exactly 0.
        bound = bound_from(want, 1e-6, 2 * u, (2 * u + F32_PARTS) * mag)
        text = f"1e-6 + {2 * u:.1e} |g| + {2 * u + F32_PARTS:.1e} terms"
        parts.append(Part(name, start, start + want.size, want, bound, text))
        start += want.size
    return Expectation(parts)
