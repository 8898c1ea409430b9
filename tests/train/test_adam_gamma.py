"""Adam against torch.optim.Adam (several steps, with and without weight
decay; bit for bit with torch 1.x, as close to float64 Adam as torch 2's
own), the gamma fit (its MLE equation in float64) and the inverse of the
regularised incomplete gamma against torch.special.gammainc."""
import os
import tempfile

from ssae_ref import np, torch, probe, run, adam_inputs, torch_adam, probe_adam, finish

P = probe()
# torch 1.x's Adam has ssae's arithmetic step for step (the first moment as
# m * beta1 + g * (1 - beta1)): bit for bit there. torch 2 computes it with
# lerp, whose rounding differs: there ssae is held to torch's own distance
# from Adam in float64.
TORCH_ADAM_AS_SSAE = int(torch.__version__.split(".")[0]) < 2
tmp = tempfile.mkdtemp()
fails = []
rng = np.random.default_rng(5)
n, steps = 1000, 4
for lr, wd in ((1e-3, 0.0), (3e-2, 0.05)):
    p0, gs = adam_inputs(rng, n, steps)
    got = probe_adam(P, tmp, "adam", p0, gs, lr, wd)
    ref = torch_adam(p0, gs, lr, wd)
    moved = np.abs(ref - p0)
    e = np.max(np.abs(got - ref) / np.maximum(moved, 1e-30))
    same = np.mean(got == ref)
    if TORCH_ADAM_AS_SSAE:
        print("adam lr %g wd %g: %.4f%% bit-identical, max error relative to the update %.2e" %
              (lr, wd, 100 * same, e))
        if not (e <= 1e-6 and same >= 0.999):
            fails.append("adam lr %g wd %g: %.3g" % (lr, wd, e))
    else:
        # torch >= 2 moves the first moment with lerp, which rounds otherwise:
        # ssae's parameters are to be as close to Adam in float64 as torch's
        # own float32 ones (within 2x and an ulp of the largest parameter)
        ref64 = torch_adam(p0.astype(np.float64), [g.astype(np.float64) for g in gs], lr, wd)
        err_s, err_t = np.max(np.abs(got - ref64)), np.max(np.abs(ref - ref64))
        ulp = np.spacing(np.float32(np.max(np.abs(ref64))))
        print("adam lr %g wd %g (torch %s): %.4f%% bit-identical; largest error against float64 "
              "Adam: ssae %.3g, torch %.3g (an ulp of the largest parameter: %.3g)"
              % (lr, wd, torch.__version__, 100 * same, err_s, err_t, ulp))
        if not err_s <= 2 * err_t + ulp:
            fails.append("adam lr %g wd %g: error %.3g against torch's %.3g" % (lr, wd, err_s, err_t))

# the portable loop (SSAE_NO_AVX2) and the AVX2 one give the same bits,
# also for a count that is not a multiple of the vectors' 8
for n_odd, (lr, wd) in ((1003, (1e-3, 0.0)), (13, (3e-2, 0.05))):
    p0, gs = adam_inputs(rng, n_odd, steps)
    vec = probe_adam(P, tmp, "adam", p0, gs, lr, wd)
    port = probe_adam(P, tmp, "adam", p0, gs, lr, wd, env=dict(os.environ, SSAE_NO_AVX2="1"))
    print("adam, %d parameters: the portable and the vector loops %s" %
          (n_odd, "agree bit for bit" if np.array_equal(vec, port) else "DIFFER"))
    if not np.array_equal(vec, port):
        fails.append("adam, %d parameters: portable and vector loops differ" % n_odd)

# gamma fit: the MLE (loc 0) solves log k - digamma(k) = log mean - mean log
for case in range(4):
    k0 = [0.7, 3.0, 25.0, 300.0][case]
    x = rng.gamma(k0, 2.5, size=[40, 200, 12, 60][case])
    r = run([P, "gamma_fit"] + ["%.17g" % v for v in x])
    k, sc = map(float, r.stdout.split())
    lhs = np.log(k) - torch.digamma(torch.tensor(k, dtype=torch.float64)).item()
    rhs = np.log(x.mean()) - np.log(x).mean()
    print("gamma fit (true k %g): k %.6g scale %.6g, equation residual %.2e, k*scale/mean-1 %.1e" %
          (k0, k, sc, lhs - rhs, k * sc / x.mean() - 1))
    if not (abs(lhs - rhs) <= 1e-10 * max(1, abs(rhs)) and abs(k * sc / x.mean() - 1) < 1e-12):
        fails.append("gamma fit case %d" % case)
r = run([P, "gamma_fit", "1.5", "1.5", "1.5"])
if r.returncode == 0 or "equal" not in r.stderr:
    fails.append("equal scores were fitted: %r" % r.stderr)

# inverse of P(a, x)
for a in (0.05, 0.5, 1.0, 2.0, 7.5, 50.0, 1000.0, 40000.0):
    for p in (1e-6, 0.1, 0.5, 0.9, 0.99, 0.999999):
        x = float(run([P, "gamma_inv", a, p]).stdout)
        back = torch.special.gammainc(torch.tensor(a, dtype=torch.float64),
                                      torch.tensor(x, dtype=torch.float64)).item()
        # torch's igamma itself is good to about 1e-9 relative (a = 50)
        if not abs(back - p) <= 1e-8 * max(p, 1e-3):
            fails.append("gamma_inv(%g, %g) = %.17g gives P = %.17g" % (a, p, x, back))
print("gamma_inv checked on 48 (a, p) pairs")
finish(fails)
