"""Adam against torch.optim.Adam (several steps, with and without weight
decay), the gamma fit (its MLE equation in float64) and the inverse of the
regularised incomplete gamma against torch.special.gammainc."""
import tempfile

from ssae_ref import np, torch, probe, run, adam_inputs, torch_adam, probe_adam, finish

P = probe()
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
    print("adam lr %g wd %g: %.4f%% bit-identical, max error relative to the update %.2e" %
          (lr, wd, 100 * same, e))
    if not (e <= 1e-6 and same >= 0.999):
        fails.append("adam lr %g wd %g: %.3g" % (lr, wd, e))

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
