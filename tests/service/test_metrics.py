#!/usr/bin/env python3
"""GET /metrics and /healthz of the service (libmicrohttpd) while a real
engine runs (service_helper): the text passes `promtool check metrics`
(Debian's prometheus package) and carries the per-machine, engine, MQTT and
clip families; /healthz is 200 while audio arrives and turns 503 when the
input stops (and 200 again when it resumes). The MQTT broker is down for the
whole run (a closed port): monitoring and metrics go on regardless."""
import os
import shutil
import subprocess
import tempfile
import time

from ssae_testlib import free_port, skip


def curl(port, path):
    r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}",
                        f"http://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=10)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


def main():
    for prog in ("curl", "promtool"):
        if not shutil.which(prog):
            skip(f"{prog} not installed (apt-get install curl prometheus)")
    exe = os.path.join(os.environ.get("SSAE_BUILD_ROOT", "."), "tests", "service",
                       "service_helper")
    tmp = tempfile.mkdtemp(prefix="ssae_metrics_")
    p = subprocess.Popen([exe, "--node", "hall-2", "--names", "press-1,pump.2",
                          "--metrics", "0", "--stale", "1",
                          "--mqtt", f"mqtt://127.0.0.1:{free_port()}",
                          "--clips", os.path.join(tmp, "clips")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         bufsize=1)
    try:
        ready = p.stdout.readline().strip()
        assert ready.startswith("ready metrics_port="), ready
        port = int(ready.split("=")[1])
        assert port > 0
        time.sleep(1.5)
        code, body = curl(port, "/metrics")
        assert code == 200, code
        path = os.path.join(tmp, "metrics.txt")
        with open(path, "w") as f:
            f.write(body)
        with open(path) as f:
            r = subprocess.run(["promtool", "check", "metrics"], stdin=f,
                               capture_output=True, text=True)
        assert r.returncode == 0, "promtool: " + r.stdout + r.stderr
        print("ok  promtool check metrics passes (%d lines)" % body.count("\n"))
        for want in ('ssae_machine_score{node="hall-2",machine="press-1"}',
                     'ssae_machine_alarm{node="hall-2",machine="pump.2"} 0',
                     'ssae_machine_windows_total{node="hall-2",machine="pump.2"}',
                     'ssae_machine_dropped_windows_total{node="hall-2",machine="press-1"} 0',
                     'ssae_machine_threshold{', 'ssae_model_info{',
                     'ssae_engine_info{node="hall-2",backend="cpu"',
                     'ssae_engine_latency_seconds_bucket{node="hall-2",le="+Inf"}',
                     'ssae_engine_latency_seconds_count{node="hall-2"}',
                     'ssae_engine_dropped_windows_total{node="hall-2"} 0',
                     'ssae_engine_xruns_total{node="hall-2"} 0',
                     'ssae_engine_nonfinite_samples_total{node="hall-2"} 0',
                     'ssae_mqtt_connected{node="hall-2"} 0',
                     'ssae_mqtt_queue_messages{', 'ssae_mqtt_dropped_messages_total{',
                     'ssae_clips_written_total{', 'ssae_up 1'):
            assert want in body, f"missing {want!r} in\n{body}"
        win = [l for l in body.splitlines()
               if l.startswith('ssae_machine_windows_total{node="hall-2",machine="press-1"}')]
        assert win and float(win[0].split()[-1]) > 10, win
        print("ok  families present; windows", win[0].split()[-1])

        code, body = curl(port, "/healthz")
        assert code == 200 and body.strip() == "ok", (code, body)
        p.stdin.write("audio off\n")
        p.stdin.flush()
        assert p.stdout.readline().startswith("audio off")
        time.sleep(1.6)
        code, body = curl(port, "/healthz")
        assert code == 503 and "no audio" in body, (code, body)
        print("ok  /healthz 200 while audio arrives, 503 after it stops:", body.strip())
        p.stdin.write("audio on\n")
        p.stdin.flush()
        assert p.stdout.readline().startswith("audio on")
        time.sleep(0.3)
        code, _ = curl(port, "/healthz")
        assert code == 200, code
        code, _ = curl(port, "/nothing")
        assert code == 404, code
        print("ok  /healthz 200 again when audio resumes; 404 elsewhere")
        p.stdin.write("quit\n")
        p.stdin.flush()
        bye = p.stdout.readline().strip()
        assert p.wait(30) == 0 and bye.endswith("dropped=0"), bye
    finally:
        if p.poll() is None:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("metrics: all checks passed")


if __name__ == "__main__":
    main()
