"""Why is the first compile of the heavy step slower on 13 cores? warm-up variants, timed."""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
mode = sys.argv[1]
out = Path(sys.argv[2])
import heavy
mod_path = heavy.write_module(Path(f"/tmp/heavy_{mode}_{os.getpid()}.py"), salt=int(time.time() * 1000) % 100000)
import importlib.util
spec = importlib.util.spec_from_file_location("hm", mod_path); hm = importlib.util.module_from_spec(spec); spec.loader.exec_module(hm)
t0 = time.perf_counter()
import jax, jax.numpy as jnp
rec = {"env": os.environ.get("TAG", ""), "mode": mode, "import": time.perf_counter() - t0}
fn, make_args, donate = hm.CASES[0]
args = make_args()
if mode == "tiny":
    t = time.perf_counter(); jax.jit(lambda x: jnp.tanh(x @ x) + 1).lower(jax.ShapeDtypeStruct((64, 64), jnp.float32)).compile(); rec["tiny"] = time.perf_counter() - t
if mode == "thread":
    import threading
    def warm():
        t = time.perf_counter(); jax.jit(lambda x: jnp.tanh(x @ x) + 1).lower(jax.ShapeDtypeStruct((64, 64), jnp.float32)).compile(); rec["tiny_bg"] = time.perf_counter() - t
    th = threading.Thread(target=warm); th.start()
for i, d in enumerate(["plain", "donated", "plain2"]):
    t = time.perf_counter()
    low = jax.jit(fn, donate_argnums=donate if d == "donated" else ()).lower(*args)
    rec[f"{d}_lower"] = time.perf_counter() - t
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter(); low.compile(); rec[f"{d}_compile"] = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    rec[f"{d}_minflt"] = r1.ru_minflt - r0.ru_minflt; rec[f"{d}_maxrss_mib"] = r1.ru_maxrss / 1024
    rec[f"{d}_sys"] = r1.ru_stime - r0.ru_stime; rec[f"{d}_user"] = r1.ru_utime - r0.ru_utime
    if mode == "thread" and i == 0: th.join()
print(json.dumps(rec), flush=True)
with open(out, "a") as f: f.write(json.dumps(rec) + "\n")
