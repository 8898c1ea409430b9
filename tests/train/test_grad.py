"""Per-parameter gradients of the MSE loss against torch autograd in
float64: relative error (L2 norm of the difference over the norm) <= 1e-4
for every tensor, several shapes (tails of the vector kernels), batches that
are not a multiple of the chunk size, each kernel set the CPU runs
(AVX-512, AVX2, baseline), and 1 vs 3 threads bit for bit."""
import os
import tempfile

from ssae_ref import *  # noqa: F401,F403  (exits 77 without torch)
from ssae_ref import np, torch, nn, NAMES, split, probe, run, run_ok, write, read, perturbed_model, finish

P = probe()
fails = []
tmp = tempfile.mkdtemp()
for case, (M, Fr, L, S, n, seed) in enumerate([(64, 5, 32, 64, 70, 1), (64, 5, 32, 64, 512, 2),
                                               (13, 3, 7, 10, 37, 3), (8, 2, 5, 19, 5, 4)]):
    m, vec, x = perturbed_model(M, Fr, L, S, n, seed)
    pf, xf, gf = (os.path.join(tmp, f) for f in ("p", "x", "g"))
    write(pf, vec)
    write(xf, x)
    outs = []
    for threads in (1, 3):
        run_ok([P, "grad", M, Fr, L, S, threads, pf, xf, gf])
        outs.append(read(gf))
    if not np.array_equal(outs[0], outs[1]):
        fails.append("case %d: 1 and 3 threads differ" % case)
    # the other kernel sets are checked against torch too: AVX2 where the
    # default is AVX-512, and the baseline (no AVX2/FMA)
    for var in ("SSAE_NO_AVX512", "SSAE_NO_AVX2"):
        run([P, "grad", M, Fr, L, S, 2, pf, xf, gf], env=dict(os.environ, **{var: "1"}))
        outs.append(read(gf))
    got = outs[0]
    m64 = m.double()
    xt = torch.from_numpy(x.astype(np.float64))
    loss = nn.MSELoss()(m64(xt), xt)
    loss.backward()
    ref = np.concatenate([dict(m64.named_parameters())[k].grad.numpy().ravel() for k in NAMES])
    lerr = abs(got[-1] - loss.item()) / loss.item()
    print("case %d (M=%d F=%d L=%d S=%d n=%d): loss %.6g rel err %.2e" % (case, M, Fr, L, S, n, loss.item(), lerr))
    if lerr > 1e-5:
        fails.append("case %d: loss rel err %.3g" % (case, lerr))
    rf = split(m, ref)
    for kind, vec in (("", got), (" (AVX2 or baseline kernels)", outs[2]),
                      (" (baseline kernels)", outs[3])):
        g = split(m, vec[:-1])
        for k in NAMES:
            e = np.linalg.norm(g[k].astype(np.float64) - rf[k]) / max(np.linalg.norm(rf[k]), 1e-30)
            print("   %-26s rel err %.2e%s" % (k, e, kind))
            if not e <= 1e-4:
                fails.append("case %d %s%s: rel err %.3g" % (case, k, kind, e))

    # forward scores against the module too
    sf = os.path.join(tmp, "s")
    r = run([P, "scores", M, Fr, L, S, 2, pf, xf, sf])
    with torch.no_grad():
        sref = ((m64(xt) - xt) ** 2).mean(dim=1).numpy()
    se = np.max(np.abs(read(sf) - sref) / sref)
    print("   window scores max rel err %.2e" % se)
    if r.returncode or not se <= 1e-5:
        fails.append("case %d: scores rel err %.3g" % (case, se))

finish(fails)
