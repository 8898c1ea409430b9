"""Adam against torch.optim.Adam (several steps, with and without weight
decay; bit for bit with torch 1.x, within an ulp a step with torch 2's
lerp), the gamma fit (its MLE equation in float64) and the inverse of the
regularised incomplete gamma against torch.special.gammainc."""
import tempfile

from ssae_ref import np, torch, probe, run, adam_inputs, torch_adam, probe_adam, finish

P = probe()
# torch 1.x's Adam has ssae's arithmetic step for step (the first moment as
# m * beta1 + g * (1 - beta1)): bit for bit there. torch 2 computes it with
# lerp, whose rounding differs: within an ulp of the parameter a step there.
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
    ulps = np.max(np.abs(got - ref) / np.spacing(np.abs(ref).astype(np.float32)))
    print("adam lr %g wd %g: %.4f%% bit-identical, max error relative to the update %.2e, "
          "%.0f ulp of the parameter" % (lr, wd, 100 * same, e, ulps))
    if TORCH_ADAM_AS_SSAE:
        if not (e <= 1e-6 and same >= 0.999):
            fails.append("adam lr %g wd %g: %.3g" % (lr, wd, e))
    elif not ulps <= steps:
        # torch >= 2 moves the first moment with lerp and so rounds it
        # otherwise: an ulp of the moment, at most an ulp of the parameter
        # a step (the error relative to the update is large only where the
        # steps nearly cancel)
        fails.append("adam lr %g wd %g (torch %s): %.0f ulp, %.4f%% identical"
                     % (lr, wd, torch.__version__, ulps, 100 * same))

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
