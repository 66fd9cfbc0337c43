"""Tests of the verification script that need no GPU: the comparisons and tolerances on
synthetic arrays, the per-day table and the command lines it builds, and (where torch
imports, on the CPU) every family check on small saved folders made here.

    python3 -m unittest discover -s verify -v
"""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# No __pycache__ beside the sources: the repository ignores only /target.
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import compare  # noqa: E402
import sanitize  # noqa: E402
import verify  # noqa: E402
from days import DAYS  # noqa: E402
from problem import Problem, Saved, Torch, VerifyError, flags  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
NO_TORCH = "SKIPPED: torch does not import here; the family checks are tested where it does"

# Day binaries built in this checkout, for the dry checks of the command lines.
DEBUG_BIN = os.path.join(os.path.dirname(HERE), "target", "debug")


class Comparisons(unittest.TestCase):
    def test_within_and_outside_the_bound(self):
        d = compare.diff([1.0, 2.0, 3.0], [1.0, 2.1, 3.0], 0.2)
        self.assertTrue(d.passed)
        self.assertAlmostEqual(d.max_abs, 0.1)
        self.assertAlmostEqual(d.worst_ratio, 0.5)
        d = compare.diff([1.0, 2.5, 3.0], [1.0, 2.1, 3.0], 0.2)
        self.assertFalse(d.passed)
        self.assertEqual((d.mismatches, d.first_mismatch), (1, 1))

    def test_a_zero_bound_is_exact(self):
        self.assertTrue(compare.diff([5.0, -0.0], [5.0, 0.0], 0.0).passed)
        d = compare.diff([5.0], [5.0 + 2**-20], 0.0)
        self.assertFalse(d.passed)
        self.assertEqual(d.worst_ratio, float("inf"))

    def test_nan_never_passes_and_equal_infinities_do(self):
        self.assertFalse(compare.diff([np.nan], [1.0], 1e9).passed)
        self.assertFalse(compare.diff([1.0], [np.nan], 1e9).passed)
        self.assertTrue(compare.diff([np.inf, -np.inf], [np.inf, -np.inf], 0.0).passed)
        d = compare.diff([np.inf], [-np.inf], 1e9)
        self.assertEqual((d.passed, d.nan_or_inf), (False, 1))

    def test_nothing_compared_is_not_a_pass(self):
        self.assertFalse(compare.diff([], [], 1.0).passed)

    def test_per_element_bounds(self):
        want = np.array([1.0, 100.0])
        bound = compare.bound_from(want, atol=0.01, rtol=0.01)
        np.testing.assert_allclose(bound, [0.02, 1.01])
        self.assertTrue(compare.diff([1.015, 100.9], want, bound).passed)
        self.assertFalse(compare.diff([1.03, 100.0], want, bound).passed)

    def test_kernel_vs_torch_gets_twice_the_bound_unless_exact(self):
        part = compare.Part("y", 0, 2, [1.0, 2.0], 0.1, "t")
        np.testing.assert_allclose(part.pair_bound, 0.2)
        ref = np.array([1.0, 2.0])
        # Torch 0.05 above the reference, the kernel 0.12 below it: within 2 x 0.1 of torch,
        # but outside 0.1 of the exact answer, which is what fails.
        r = compare.compare_part(compare.Part("y", 0, 2, [1.05, 2.0], 0.1, "t"), np.array([0.88, 2.0]), ref)
        self.assertTrue(r.vs_torch.passed)
        self.assertFalse(r.vs_ref.passed)
        self.assertIn("kernel vs reference", r.failure())
        exact = compare.Part("q", 0, 1, [3.0], 0.0, "exact", pair_bound=0.0)
        self.assertFalse(compare.compare_part(exact, np.array([3.0 + 1e-6]), None).passed)

    def test_torch_off_the_reference_is_reported_as_such(self):
        r = compare.compare_part(compare.Part("y", 0, 1, [1.5], 0.1, "t"), np.array([1.5]), np.array([1.0]))
        self.assertIn("torch vs reference", r.failure())

    def test_a_part_must_match_its_slice(self):
        with self.assertRaises(ValueError):
            compare.Part("y", 0, 3, [1.0, 2.0], 0.1, "t")

    def test_summation_bounds(self):
        # gamma(d) = d u / (1 - d u), u = 2^-24.
        self.assertAlmostEqual(float(compare.sum_bound(10, 1.0)), 10 * 2**-24 / (1 - 10 * 2**-24))
        with self.assertRaises(ValueError):
            compare.sum_bound(1 << 23, 1.0)
        # The matmul days' bound at k = 1024: 2^-24 (1024^1.5 / 4 + 4).
        self.assertAlmostEqual(compare.dot_bound(1024), 2**-24 * (32768 / 4 + 4))
        self.assertEqual(compare.unit_roundoff("bf16"), 2**-8)
        with self.assertRaises(ValueError):
            compare.unit_roundoff("i8")


class Flags(unittest.TestCase):
    def test_flags_are_spelled_as_clap_wants_them(self):
        self.assertEqual(
            flags(rows=7, seqlen_k=None, causal=True, deterministic=False, pass_="forward", varlen=[1, 17]),
            ("--rows", "7", "--causal", "--pass", "forward", "--varlen", "1,17"),
        )
        self.assertEqual(flags(za=-3), ("--za", "-3"))


class DayTable(unittest.TestCase):
    def test_every_day_has_a_small_and_a_medium_problem_with_unique_labels(self):
        self.assertEqual(list(DAYS), [f"day{i:02}" for i in range(25)])
        for day, problems in DAYS.items():
            labels = [p.label for p in problems]
            self.assertEqual(len(labels), len(set(labels)), day)
            self.assertTrue(any(label.startswith("small") for label in labels), day)
            self.assertTrue(len(problems) >= 2, day)
            for p in problems:
                self.assertTrue(callable(p.check))
                self.assertFalse({"--save", "--iters", "--warmup", "--json"} & set(p.args), (day, p.label))

    def test_the_command_adds_save_one_run_and_the_json_report(self):
        p = DAYS["day05"][0]
        cmd = verify.command("/b", "day05", p, "/s")
        self.assertEqual(cmd[0], "/b/day05")
        self.assertEqual(cmd[-8:], ["--save", "/s", "--iters", "1", "--warmup", "0", "--json", "/s/report.json"])

    def test_the_day_binaries_parse_every_command_line(self):
        """Without a GPU a day must stop at opening it (exit 2, `error: no ... driver`), after
        its flags parsed and its sizes were checked: a flag the table misspells would stop it
        earlier, with clap's error."""
        if not all(os.access(os.path.join(DEBUG_BIN, d), os.X_OK) for d in DAYS):
            self.skipTest("SKIPPED: the day binaries are not built in target/debug")
        for day, problems in DAYS.items():
            for p in problems:
                with tempfile.TemporaryDirectory() as tmp:
                    cmd = verify.command(DEBUG_BIN, day, p, tmp)
                    env = {**os.environ, "LD_LIBRARY_PATH": ""}
                    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
                    err = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
                    opened = err.startswith("error:") and ("GPU" in err or "driver" in err)
                    if done.returncode != 2 or not opened:
                        self.fail(f"{' '.join(cmd)}: exit {done.returncode}: {err}")


def run_main(argv):
    """verify.main with its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = verify.main(argv)
    return rc, out.getvalue(), err.getvalue()


class PeerDays(unittest.TestCase):
    def test_every_peer_script_names_days_of_this_workspace(self):
        # run.sh --days runs a peer script only for the days its `DAYS = "..."` line names.
        root = os.path.dirname(HERE)
        peers = os.path.join(root, "peers")
        days = {name.split("_")[0] for name in os.listdir(root) if name.startswith("day")}
        scripts = [n for n in os.listdir(peers) if n.endswith(".py") and not n.startswith("_")]
        self.assertTrue(scripts)
        for name in scripts:
            with open(os.path.join(peers, name)) as f:
                lines = [l for l in f if l.startswith('DAYS = "')]
            self.assertEqual(len(lines), 1, name)
            named = lines[0].split('"')[1].split()
            self.assertTrue(named, name)
            self.assertTrue(set(named) <= days, f"{name}: {named}")


class Main(unittest.TestCase):
    def test_bad_arguments_exit_2_with_one_error_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, _, err = run_main(["--bin", tmp, "--out", tmp, "--days", "day99"])
            self.assertEqual(rc, 2)
            self.assertRegex(err, r"^error: no day day99 in verify/days.py")
            rc, _, err = run_main(["--bin", os.path.join(tmp, "nope"), "--out", tmp, "--days", "day00"])
            self.assertEqual((rc, err.count("\n")), (2, 1))
            rc, _, err = run_main(["--bin", tmp, "--out", tmp, "--days", "day00"])
            self.assertEqual(rc, 2)
            self.assertIn("no executable day00", err)

    def test_no_cuda_device_exits_2(self):
        if torch is not None and torch.cuda.is_available():
            self.skipTest("SKIPPED: this machine has a CUDA device")
        with tempfile.TemporaryDirectory() as tmp:
            stub = os.path.join(tmp, "day00")
            with open(stub, "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(stub, 0o755)
            rc, _, err = run_main(["--bin", tmp, "--out", tmp, "--days", "day00"])
            self.assertEqual(rc, 2)
            self.assertRegex(err, r"^error: torch (does not import|sees no CUDA device)")
            rc, out, _ = run_main(["--bin", tmp, "--out", tmp, "--days", "day00", "--dry-run"])
            self.assertEqual(rc, 0)
            self.assertIn("day00 --n 1001 --save", out)

    def test_a_day_with_nothing_verified_fails(self):
        recs = [{"day": "day17", "verdict": verify.GAP}, {"day": "day00", "verdict": verify.PASS}]
        failed = verify.day_verdicts(recs, ["day00", "day17"])
        self.assertEqual([r["day"] for r in failed], ["day17"])
        self.assertFalse(verify.summary(recs + failed)[1])
        self.assertTrue(verify.summary([recs[1], {"verdict": verify.GAP}])[1])
        self.assertFalse(verify.summary([])[1])


class SavedFolder(unittest.TestCase):
    """A --save folder made here, as the days write it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def save(self, name, array, dtype=np.float32):
        np.save(os.path.join(self.dir, name + ".npy"), np.asarray(array, dtype=dtype))

    def saved(self):
        return Saved(self.dir)

    def test_inputs_are_checked_against_the_shape_the_day_saves(self):
        self.save("x", np.zeros((2, 3)))
        self.save("out_a", np.zeros(6))
        s = self.saved()
        self.assertEqual((s.versions, s.input_names, s.reference()), (["a"], ["x"], None))
        with self.assertRaises(VerifyError):
            s.input("x", (3, 2))
        with self.assertRaises(VerifyError):
            s.input("y", (2, 3))
        with self.assertRaises(VerifyError):
            s.output("a", 5)


def bf16_round(a):
    """Round f32 values to bf16 (nearest even), as numpy arrays: the test's own storage type."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def same_conv(x, w, extra_before=False):
    """NCHW "same" cross-correlation in f64, stride 1, as torch's padding="same": the extra
    zero of an even filter after the input (`extra_before` puts it before: a wrong kernel)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    _, _, h, wd = x.shape
    kh, kw = w.shape[2:]

    def sides(k):
        before = (k - 1) // 2
        return (k - 1 - before, before) if extra_before else (before, k - 1 - before)

    xp = np.pad(x, ((0, 0), (0, 0), sides(kh), sides(kw)))
    return sum(
        np.einsum("nchw,oc->nohw", xp[:, :, ky : ky + h, kx : kx + wd], w[:, :, ky, kx])
        for ky in range(kh)
        for kx in range(kw)
    )


@unittest.skipIf(torch is None, NO_TORCH)
class FamilyChecks(SavedFolder):
    """Each family's check on the CPU: the kernel's output is stood in for by the exact
    answer rounded as a kernel would round it (passes), and by that with one element wrong
    (fails). The f64 reference is computed here with NumPy."""

    def setUp(self):
        super().setUp()
        self.tc = Torch(torch, "cpu")
        self.rng = np.random.default_rng(0)

    def uniform(self, shape, lo=-1.0, hi=1.0):
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    def verify(self, problem, day="dayNN"):
        return verify.verify_saved(day, problem, self.saved(), self.tc)

    def assert_verdicts(self, records, want):
        """`want`: the verdicts in the order of the versions' names (as the folder lists
        them), the not-verifiable ones (version `-`) first."""
        got = sorted(records, key=lambda r: (r["version"] != "-", r["version"]))
        self.assertEqual([r["verdict"] for r in got], want, [r["detail"] for r in got])

    def test_vector_add_is_exact_against_torch(self):
        from vector_add import problem

        a, b = self.uniform(101), self.uniform(101)
        self.save("a", a), self.save("b", b)
        self.save("reference", a.astype(np.float64) + b, np.float64)
        self.save("out_good", a + b)
        bad = a + b
        bad[7] = np.nextafter(bad[7], np.float32(9))
        self.save("out_one_ulp_off", bad)
        self.assert_verdicts(self.verify(problem("t", 101)), [verify.PASS, verify.MISMATCH])

    def softmax_case(self, dtype, rows=5, cols=301):
        from softmax import problem

        x = self.uniform((rows, cols), -8, 8)
        if dtype == "bf16":
            x = bf16_round(x)
        e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        ref = e / e.sum(1, keepdims=True)
        self.save("x", x)
        self.save("reference", ref, np.float64)
        out = ref.astype(np.float32)
        if dtype == "bf16":
            out = bf16_round(out)
        self.save("out_good", out)
        bad = out.copy()
        bad[3, 100] *= 1.05
        self.save("out_wrong", bad)
        return problem("t", rows, cols, dtype)

    def test_softmax_f32_and_bf16(self):
        for dtype in ("f32", "bf16"):
            with self.subTest(dtype=dtype):
                p = self.softmax_case(dtype)
                self.assert_verdicts(self.verify(p), [verify.PASS, verify.MISMATCH])
                for name in os.listdir(self.dir):
                    os.remove(os.path.join(self.dir, name))

    def test_sgemm_and_tensor_core_layouts(self):
        import matmul

        m, n, k = 9, 7, 33
        a, b = self.uniform((m, k)), self.uniform((k, n))
        ref = a.astype(np.float64) @ b
        self.save("a", a), self.save("b", b), self.save("reference", ref, np.float64)
        self.save("out_good", ref.astype(np.float32))
        self.save("out_lost_term", (ref - np.outer(a[:, 0], b[0, :]) * (np.arange(m)[:, None] == 2)).astype(np.float32))
        self.assert_verdicts(self.verify(matmul.sgemm("t", m, n, k)), [verify.PASS, verify.MISMATCH])
        # Day 18: A stored [k, m], B stored [k, n], bf16, no reference saved.
        a16, b16 = bf16_round(a), bf16_round(b)
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        self.save("a", a16.T[None]), self.save("b", b16[None])
        self.save("out_good", bf16_round((a16.astype(np.float64) @ b16).astype(np.float32))[None])
        p = matmul.tensor_core("t", m, n, k, "bf16", a="transposed", b="as-is")
        records = self.verify(p)
        self.assert_verdicts(records, [verify.PASS])
        self.assertIsNone(records[0]["parts"][0]["vs_reference"])

    def test_gemv(self):
        from gemv import problem

        a, x = self.uniform((5, 77)), self.uniform(77)
        ref = a.astype(np.float64) @ x
        self.save("a", a), self.save("x", x), self.save("reference", ref, np.float64)
        self.save("out_good", ref.astype(np.float32))
        self.save("out_wrong", (ref + 0.01 * (np.arange(5) == 4)).astype(np.float32))
        self.assert_verdicts(self.verify(problem("t", 5, 77)), [verify.PASS, verify.MISMATCH])

    def test_rms_norm_forward_and_backward(self):
        import norms

        rows, cols, eps = 4, 64, 1e-6
        x, w, dy = self.uniform((rows, cols)), self.uniform(cols, 0.5, 1.5), self.uniform((rows, cols))
        x64, w64, dy64 = (v.astype(np.float64) for v in (x, w, dy))
        rstd = 1 / np.sqrt((x64**2).mean(1, keepdims=True) + eps)
        y = x64 * rstd * w64
        self.save("x", x), self.save("weight", w), self.save("reference", y, np.float64)
        self.save("out_good", y.astype(np.float32))
        self.save("out_no_weight", (x64 * rstd).astype(np.float32))
        p = norms.problem("t", "rms", "forward", rows, cols, "f32")
        self.assert_verdicts(self.verify(p), [verify.PASS, verify.MISMATCH])
        # Backward: dx = rstd (w dy - xhat mean(w dy xhat)), dweight = sum_rows dy xhat.
        xhat = x64 * rstd
        g = w64 * dy64
        dx = rstd * (g - xhat * (g * xhat).mean(1, keepdims=True))
        dw = (dy64 * xhat).sum(0)
        grads = np.concatenate([dx, dw[None]])
        self.save("dy", dy), self.save("reference", grads, np.float64)
        self.save("out_good", grads.astype(np.float32))
        wrong = grads.copy()
        wrong[-1] *= 2  # dweight doubled
        self.save("out_no_weight", wrong.astype(np.float32))
        p = norms.problem("t", "rms", "backward", rows, cols, "f32")
        records = self.verify(p)
        self.assert_verdicts(records, [verify.PASS, verify.MISMATCH])
        self.assertIn("dweight", records[1]["detail"])

    def test_layer_norm_backward_parts(self):
        import norms

        rows, cols, eps = 3, 40, 1e-5
        x, w, dy = self.uniform((rows, cols)), self.uniform(cols, 0.5, 1.5), self.uniform((rows, cols))
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
        bt = torch.zeros(cols, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.layer_norm(xt, (cols,), wt, bt, eps).backward(torch.tensor(dy, dtype=torch.float64))
        grads = np.concatenate([xt.grad.numpy(), wt.grad.numpy()[None], bt.grad.numpy()[None]])
        self.save("x", x), self.save("weight", w), self.save("dy", dy)
        self.save("reference", grads, np.float64)
        self.save("out_good", grads.astype(np.float32))
        p = norms.problem("t", "layer", "backward", rows, cols, "f32")
        records = self.verify(p)
        self.assert_verdicts(records, [verify.PASS])
        self.assertEqual([part["part"] for part in records[0]["parts"]], ["dx", "dweight", "dbias"])

    def test_activations_and_a_missing_scale(self):
        import activations

        x = bf16_round(self.uniform((3, 50), -6, 6))
        xt = torch.tensor(x, dtype=torch.float64)
        ref = torch.nn.functional.gelu(xt, approximate="tanh").numpy()
        self.save("x", x), self.save("reference", ref, np.float64)
        self.save("out_good", bf16_round(ref.astype(np.float32)))
        self.save("out_wrong_erf", bf16_round(torch.nn.functional.gelu(xt).numpy().astype(np.float32)))
        records = self.verify(activations.problem("t", "gelu_tanh", 3, 50, "bf16"))
        self.assert_verdicts(records, [verify.PASS, verify.MISMATCH])
        records = self.verify(activations.problem("t", "bias_dropout_add", 3, 50, "f16"))
        self.assert_verdicts(records, [verify.GAP])
        # An op's own scalars become flags and reach its torch formula.
        p = activations.problem("t", "gelu_tanh", 3, 50, "bf16", negative_slope=0.2)
        self.assertEqual(p.args[-2:], ("--negative-slope", "0.2"))
        self.assertEqual(p.params["scalars"], {"negative_slope": 0.2})

    def test_quantize_codes_are_exact(self):
        import quantize

        x = self.uniform((4, 60), -3, 5)
        scale = np.float32(np.float32(max(x.max(), -x.min())) / np.float32(127))
        q = np.clip(np.round(x / scale), -127, 127)  # np.round is half-to-even, like rint
        self.save("x", x), self.save("reference", q, np.float64)
        self.save("out_good", q)
        off = q.copy()
        off[0, 0] += 1
        self.save("out_one_code_off", off)
        records = self.verify(quantize.quantize("t", "sym", 4, 60))
        self.assert_verdicts(records, [verify.PASS, verify.MISMATCH])
        self.assert_verdicts(self.verify(quantize.dequantize("t", 4, 60)), [verify.GAP])

    def test_reductions_and_the_integer_scan(self):
        import reductions

        x = self.uniform(1001, -0.5, 1.5)
        s = x.astype(np.float64).sum()
        self.save("x", x), self.save("reference", [s], np.float64)
        self.save("out_good", [s])
        self.save("out_lost_one", [s - x[500]])
        self.assert_verdicts(self.verify(reductions.problem("t", "sum", 1001)), [verify.PASS, verify.MISMATCH])
        xi = self.rng.integers(-2, 5, 1001).astype(np.float32)
        self.save("x", xi), self.save("reference", np.cumsum(xi), np.float64)
        self.save("out_good", np.cumsum(xi))
        os.remove(os.path.join(self.dir, "out_lost_one.npy"))
        records = self.verify(reductions.problem("t", "scan", 1001))
        self.assert_verdicts(records, [verify.GAP, verify.PASS])
        self.save("x", xi + 0.25)
        with self.assertRaises(VerifyError):
            self.verify(reductions.problem("t", "scan", 1001))

    def test_attention_forward_with_gqa_varlen_and_a_causal_mask(self):
        import attention

        heads, kv_heads, d, lens = 4, 2, 16, [3, 9]
        q = bf16_round(self.uniform((sum(lens), heads, d), -2, 2))
        k = bf16_round(self.uniform((sum(lens), kv_heads, d), -2, 2))
        v = bf16_round(self.uniform((sum(lens), kv_heads, d)))
        self.save("q", q), self.save("k", k), self.save("v", v)
        # The exact answer in f64, bottom-right causal (equal lengths: the usual triangle).
        out, start = [], 0
        for n in lens:
            for t in range(n):
                for h in range(heads):
                    s = k[start : start + t + 1, h // 2].astype(np.float64) @ q[start + t, h] / np.sqrt(d)
                    p = np.exp(s - s.max())
                    out.append(p @ v[start : start + t + 1, h // 2] / p.sum())
            start += n
        ref = np.array(out)
        self.save("reference", ref, np.float64)
        self.save("out_good", bf16_round(ref.astype(np.float32)))
        self.save("out_not_causal", bf16_round((ref + 0.05).astype(np.float32)))
        p = attention.problem("t", "day10", lens, heads, d, "bf16", kv_heads=kv_heads, causal=True, uniform=False)
        self.assert_verdicts(self.verify(p), [verify.PASS, verify.MISMATCH])

    def test_attention_backward_against_autograd_in_f64(self):
        import attention

        heads, d, lens = 2, 16, [5]
        q, k, v, d_o = (bf16_round(self.uniform((5, heads, d), -1, 1)) for _ in range(4))
        for name, a in (("q", q), ("k", k), ("v", v), ("d_o", d_o)):
            self.save(name, a)
        t = [torch.tensor(a, dtype=torch.float64).transpose(0, 1).requires_grad_(True) for a in (q, k, v)]
        torch.nn.functional.scaled_dot_product_attention(*t).backward(torch.tensor(d_o, dtype=torch.float64).transpose(0, 1))
        grads = np.concatenate([g.grad.transpose(0, 1).reshape(-1).numpy() for g in t])
        self.save("out_good", bf16_round(grads.astype(np.float32)))
        self.save("out_wrong_dv", bf16_round(np.concatenate([grads[: 2 * grads.size // 3], np.zeros(grads.size // 3)]).astype(np.float32)))
        records = self.verify(attention.problem("t", "day20", lens, heads, d, "bf16"))
        self.assert_verdicts(records, [verify.PASS, verify.MISMATCH])
        self.assertIn("dv", records[1]["detail"])

    def test_fused_linear_cross_entropy(self):
        import cross_entropy

        tokens, hidden, vocab = 6, 8, 50
        h, w = bf16_round(self.uniform((tokens, hidden))), bf16_round(self.uniform((vocab, hidden), -2, 2))
        targets = np.array([3, -100, 7, 49, 0, 12], np.float32)
        self.save("h", h), self.save("w", w), self.save("targets", targets)
        ht = torch.tensor(h, dtype=torch.float64, requires_grad=True)
        wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.cross_entropy(ht @ wt.T, torch.tensor(targets).long(), label_smoothing=0.1).backward()
        grads = np.concatenate([ht.grad.numpy().ravel(), wt.grad.numpy().ravel()])
        self.save("out_good", bf16_round(grads.astype(np.float32)))
        self.save("out_wrong_scale", bf16_round(grads.astype(np.float32)) * 1.1)
        p = cross_entropy.problem("t", "fused", tokens, hidden, vocab, label_smoothing=0.1)
        self.assert_verdicts(self.verify(p), [verify.PASS, verify.MISMATCH])
        p = cross_entropy.problem("t", "ce", tokens, hidden, vocab)
        os.remove(os.path.join(self.dir, "targets.npy"))
        self.assert_verdicts(self.verify(p), [verify.GAP])

    def test_data_movement_is_exact_and_needs_its_input(self):
        import movement

        self.save("out_vec4", np.zeros(6))
        self.assert_verdicts(self.verify(movement.problem("t", "transpose", rows=2, cols=3)), [verify.GAP])
        x = self.uniform((2, 3))
        self.save("x", x), self.save("out_vec4", x.T), self.save("out_naive", x)
        self.assert_verdicts(
            self.verify(movement.problem("t", "transpose", rows=2, cols=3)), [verify.MISMATCH, verify.PASS]
        )

    def test_conv1d_even_filter_pads_after_and_is_not_flipped(self):
        import conv

        n, width = 101, 4
        x, w = bf16_round(self.uniform(n)), bf16_round(self.uniform(width))
        self.save("x", x), self.save("w", w)
        ref = same_conv(x[None, None, None], w[None, None, None])[0, 0, 0]
        self.save("reference", ref, np.float64)
        self.save("out_good", bf16_round(ref.astype(np.float32)))
        # torch puts the extra zero of an even filter after: one before, two after for 4 taps.
        wrong_side = same_conv(x[None, None, None], w[None, None, None], extra_before=True)[0, 0, 0]
        self.save("out_padded_before", bf16_round(wrong_side.astype(np.float32)))
        # A true convolution (filter flipped) is not what torch calls one.
        flipped = same_conv(x[None, None, None], w[None, None, None, ::-1])[0, 0, 0]
        self.save("out_flipped", bf16_round(flipped.astype(np.float32)))
        records = self.verify(conv.conv1d("t", n, width, "bf16"))
        self.assert_verdicts(records, [verify.MISMATCH, verify.PASS, verify.MISMATCH])
        self.assertIn("2^-8 |y|", records[0]["parts"][0]["tolerance"])

    def test_conv2d_single_image_and_nchw_channels(self):
        import conv

        x, w = bf16_round(self.uniform((1, 1, 9, 14))), bf16_round(self.uniform((1, 1, 2, 4)))
        ref = same_conv(x, w)
        self.save("x", x), self.save("w", w), self.save("reference", ref, np.float64)
        self.save("out_good", bf16_round(ref.astype(np.float32)))
        self.save("out_padded_before", bf16_round(same_conv(x, w, extra_before=True).astype(np.float32)))
        p = conv.conv2d("t", (9, 14), (2, 4), "bf16")
        self.assertEqual(p.args, ("--op", "conv2d", "--image", "9x14", "--filter", "2x4", "--dtype", "bf16"))
        self.assert_verdicts(self.verify(p), [verify.PASS, verify.MISMATCH])
        for name in os.listdir(self.dir):
            os.remove(os.path.join(self.dir, name))
        # NCHW in f32: each output sums C_in KH KW = 3 x 4 x 3 products.
        x, w = self.uniform((2, 3, 7, 11)), self.uniform((5, 3, 4, 3))
        ref = same_conv(x, w)
        self.save("x", x), self.save("w", w), self.save("reference", ref, np.float64)
        self.save("out_good", ref.astype(np.float32))
        lost = ref - same_conv(x[:, 2:], w[:, 2:])  # the last input channel left out
        self.save("out_lost_channel", lost.astype(np.float32))
        p = conv.conv2d_nchw("t", 2, 3, 5, (7, 11), (4, 3), "f32")
        records = self.verify(p)
        self.assert_verdicts(records, [verify.PASS, verify.MISMATCH])
        self.assertIn("k = 36", records[0]["parts"][0]["tolerance"])
        # The weights as the day saves them, [C_out, C_in, KH, KW], or the problem fails.
        self.save("w", w.transpose(1, 0, 2, 3))
        with self.assertRaises(VerifyError):
            self.verify(p)

    def test_a_problem_with_no_output_saved_fails(self):
        from vector_add import problem

        self.save("a", np.zeros(3)), self.save("b", np.zeros(3))
        with self.assertRaises(VerifyError):
            self.verify(problem("t", 3))


# A stand-in for day00: writes what `--save` writes (a right and a wrong version), the JSON
# report with one refused version, and exits with the code given in its environment.
FAKE_DAY00 = """#!/usr/bin/env python3
import json, os, sys
import numpy as np
args = sys.argv[1:]
save, n = args[args.index("--save") + 1], int(args[args.index("--n") + 1])
a = np.linspace(-1, 1, n, dtype=np.float32)
b = np.linspace(1, 0, n, dtype=np.float32)
np.save(os.path.join(save, "a.npy"), a)
np.save(os.path.join(save, "b.npy"), b)
np.save(os.path.join(save, "reference.npy"), a.astype(np.float64) + b)
np.save(os.path.join(save, "out_naive.npy"), a + b)
if os.environ.get("FAKE_WRONG"):
    np.save(os.path.join(save, "out_vec4.npy"), a + b + 1e-3)
json.dump([{"rows": [], "refused": [{"version": "vec8", "why": "needs n % 8 == 0"}]}],
          open(args[args.index("--json") + 1], "w"))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@unittest.skipIf(torch is None, NO_TORCH)
class EndToEnd(unittest.TestCase):
    """verify.main on a stand-in day binary, torch on the CPU (VERIFY_TORCH_DEVICE)."""

    def run_fake(self, **env):
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir, out = os.path.join(tmp, "bin"), os.path.join(tmp, "out")
            os.makedirs(bin_dir)
            with open(os.path.join(bin_dir, "day00"), "w") as f:
                f.write(FAKE_DAY00.replace("#!/usr/bin/env python3", "#!" + sys.executable))
            os.chmod(os.path.join(bin_dir, "day00"), 0o755)
            saved_env = dict(os.environ)
            os.environ.update({"VERIFY_TORCH_DEVICE": "cpu", "PYTHONPATH": os.pathsep.join(sys.path), **env})
            try:
                rc, stdout, _ = run_main(["--bin", bin_dir, "--out", out, "--days", "day00"])
            finally:
                os.environ.clear()
                os.environ.update(saved_env)
            with open(os.path.join(out, "verify.json")) as f:
                report = json.load(f)
            self.assertFalse(os.path.exists(os.path.join(out, "saved", "day00", "small")), "arrays kept without --keep")
            return rc, stdout, report

    def test_every_version_passes(self):
        rc, stdout, report = self.run_fake()
        self.assertEqual(rc, 0, stdout)
        verdicts = {(r["problem"], r["version"], r["verdict"]) for r in report["records"]}
        self.assertIn(("small", "naive", "PASS"), verdicts)
        self.assertIn(("medium", "vec8", "refused"), verdicts)
        self.assertTrue(report["passed"])
        self.assertRegex(stdout, r"day00  small +naive +PASS +vs torch: abs 0.00e\+00")

    def test_a_wrong_version_and_a_failed_binary_exit_1(self):
        rc, stdout, report = self.run_fake(FAKE_WRONG="1")
        self.assertEqual(rc, 1)
        self.assertIn("vec4", stdout)
        self.assertIn("MISMATCH", stdout)
        rc, stdout, report = self.run_fake(FAKE_EXIT="1")
        self.assertEqual(rc, 1)
        self.assertIn("day00 exited 1", stdout)


class FakeProblem(unittest.TestCase):
    def test_a_problem_carries_its_params_to_its_check(self):
        seen = {}

        def check(saved, tc, **params):
            seen.update(params)
            return compare.Expectation()

        Problem("x", (), check, {"n": 3}).expect(None, None)
        self.assertEqual(seen, {"n": 3})



class Sanitize(unittest.TestCase):
    def test_every_day_runs_each_tool_on_a_small_problem(self):
        for day in DAYS:
            runs = sanitize.runs_of(day)
            self.assertEqual({tool for tool, _, _ in runs}, set(sanitize.TOOLS), day)
            self.assertTrue(all(label.startswith("small") for _, label, _ in runs), day)

    def test_initcheck_narrows_the_kernel_list_and_the_other_tools_do_not(self):
        runs = {tool: args for tool, _, args in sanitize.runs_of("day19")}
        self.assertEqual(runs["initcheck"].count("--kernel"), 1)
        self.assertEqual(runs["initcheck"][-2:], ("--kernel", sanitize.INITCHECK_KERNELS["day19"]))
        # The row kernels on host-uploaded logits: every cross-entropy version, no fused one.
        self.assertIn("cluster_push", sanitize.INITCHECK_KERNELS["day19"])
        self.assertNotIn("chunked", sanitize.INITCHECK_KERNELS["day19"])
        self.assertIn("naive,chunked_cublas,chunked_day18", runs["racecheck"])

    def test_the_attention_days_race_and_sync_check_every_head_dim_and_mask(self):
        for day in ("day10", "day20"):
            runs = sanitize.runs_of(day)
            small = [p for p in DAYS[day] if p.label.startswith("small")]
            for tool in ("memcheck", "racecheck", "synccheck"):
                labels = [label for t, label, _ in runs if t == tool]
                self.assertEqual(labels, [p.label for p in small], (day, tool))
            cases = {(p.params["d"], p.params["causal"]) for p in small}
            self.assertEqual(cases, {(d, c) for d in (64, 128, 256) for c in (False, True)}, day)
            self.assertEqual(len([t for t, _, _ in runs if t == "initcheck"]), 1, day)

    def test_with_kernels_replaces_a_list_or_adds_one(self):
        self.assertEqual(sanitize.with_kernels(("--n", "3", "--kernel", "a,b"), "c"), ("--n", "3", "--kernel", "c"))
        self.assertEqual(sanitize.with_kernels(("--n", "3"), "c"), ("--n", "3", "--kernel", "c"))


if __name__ == "__main__":
    unittest.main()
